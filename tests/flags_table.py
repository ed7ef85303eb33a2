#!/usr/bin/env python3
"""Writes docs/flags.md: every flag of every binary, from their --helpfull.

    python3 tests/flags_table.py --bin_dir=bazel-bin --out=docs/flags.md

Only the flags the project defines are listed (Abseil's own, such as
--flagfile, are left out). tests/flags_table_test.sh runs this over the
binaries Bazel built and fails when docs/flags.md differs, so that the table
cannot drift from the code.
"""

import argparse
import re
import subprocess
import sys

BINARIES = [
    "server/ps_server",
    "server/ps_serve",
    "worker/ps_worker",
    "ops/ps_admin",
    "worker/predict/ps_predict",
    "worker/predict/ps_export_dump",
    "worker/datagen/clicklog_gen",
]

FLAG_SECTION = re.compile(r"^  Flags from (\S+):$")
FLAG_START = re.compile(r"^    --")
FLAG_ENTRY = re.compile(r"^--(\S+) \((.*)\); default: (.*);$", re.S)


def project_file(path):
    """Whether a --helpfull section names one of the project's own files."""
    path = path[2:] if path.startswith("./") else path
    return not (path.startswith("absl/") or path.startswith("/")
                or path.startswith("external/"))


def flags_of(binary):
    """[(name, default, help)] of `binary`'s own flags, sorted by name."""
    # Abseil's --helpfull exits 1 after printing.
    result = subprocess.run([binary, "--helpfull"], capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"})
    text = result.stdout + result.stderr
    flags = []
    in_project = False
    entry = None

    def finish():
        if entry is None:
            return
        joined = " ".join(part.strip() for part in entry)
        match = FLAG_ENTRY.match(joined)
        if not match:
            sys.exit(f"{binary}: cannot read the flag entry: {joined}")
        flags.append((match.group(1), match.group(3), match.group(2)))

    for line in text.splitlines():
        section = FLAG_SECTION.match(line)
        if section:
            finish()
            entry = None
            in_project = project_file(section.group(1))
            continue
        if not in_project:
            continue
        if FLAG_START.match(line):
            finish()
            entry = [line]
        elif entry is not None and line.startswith("      "):
            entry.append(line)
        elif entry is not None:
            finish()
            entry = None
    finish()
    if not flags:
        sys.exit(f"{binary}: no flags found in its --helpfull")
    return sorted(flags)


def cell(text):
    return text.replace("|", "\\|")


def table(bin_dir):
    lines = [
        "# Every binary's flags",
        "",
        "Generated from each binary's `--helpfull` by `tests/flags_table.py`",
        "(`python3 tests/flags_table.py --bin_dir=bazel-bin "
        "--out=docs/flags.md`",
        "after `bazel build //...`); `tests/flags_table_test.sh` fails when",
        "this file and the binaries disagree.",
        "",
    ]
    for binary in BINARIES:
        name = binary.rsplit("/", 1)[1]
        lines += [f"## {name}", "", "| flag | default | what it does |",
                  "| --- | --- | --- |"]
        for flag, default, help_text in flags_of(f"{bin_dir}/{binary}"):
            lines.append(
                f"| `--{flag}` | `{cell(default)}` | {cell(help_text)} |")
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin_dir", required=True,
                        help="where server/ps_server etc. are (bazel-bin)")
    parser.add_argument("--out", required=True, help="the file to write")
    args = parser.parse_args()
    with open(args.out, "w") as out:
        out.write(table(args.bin_dir))


if __name__ == "__main__":
    main()
