#!/usr/bin/python3
"""Builds the ps_client wheel (a zip, as PEP 427 describes it) from files
given as ARCHIVE_PATH=FILE, with no build backend or network:

    build_wheel.py OUT_DIR VERSION ps_client/__init__.py=python/ps_client/__init__.py ...

Writes OUT_DIR/ps_client-VERSION-py3-none-any.whl; `pip install` it into a
virtual environment made with --system-site-packages, where Debian's
python3-grpcio and python3-protobuf satisfy its requirements.
"""
import base64
import hashlib
import os
import sys
import zipfile

NAME = "ps_client"
METADATA = """Metadata-Version: 2.1
Name: ps-client
Version: {version}
Summary: Admin queries and scoring for the parameter server (shards, ps_serve) over gRPC
Requires-Python: >=3.9
Requires-Dist: grpcio>=1.51
Requires-Dist: protobuf>=3.20
"""
WHEEL = """Wheel-Version: 1.0
Generator: parameter_server build_wheel.py
Root-Is-Purelib: true
Tag: py3-none-any
"""


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def main(out_dir, version, *pairs):
    dist_info = f"{NAME}-{version}.dist-info"
    entries = []
    for pair in sorted(pairs):
        archive_path, _, path = pair.partition("=")
        with open(path, "rb") as f:
            entries.append((archive_path, f.read()))
    entries.append((f"{dist_info}/METADATA", METADATA.format(version=version).encode()))
    entries.append((f"{dist_info}/WHEEL", WHEEL.encode()))
    entries.append((f"{dist_info}/top_level.txt", f"{NAME}\n".encode()))
    record = [record_line(p, d) for p, d in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    out = os.path.join(out_dir, f"{NAME}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for archive_path, data in entries:
            # A fixed time: the same sources make the same wheel.
            info = zipfile.ZipInfo(archive_path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
