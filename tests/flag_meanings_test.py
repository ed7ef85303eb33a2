#!/usr/bin/python3
"""One flag name, one meaning, in every binary that has it.

A user moves between ps_server, ps_serve, ps_worker, ps_admin, ps_predict
and clicklog_gen; a flag name they learned in one must mean the same in the
others. MEANINGS lists every name that more than one binary defines: what
it means, the binaries that have it, and a pattern each one's help must
match. The test fails when a binary defines a name another has and the
table does not list it, when the binaries differ from the table's (a name
given to one more binary is a change to look at), or when a help does not
say the meaning. Defaults agree too, except where the table says why not.
Deprecated old names (help "Deprecated: use --NEW.") are left out: they
keep their old meaning until they go.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flags_table import BINARIES, flags_of  # noqa: E402

# name: (meaning, {binary: default reason or None}, help pattern)
# A default reason (a string) says why that binary's default differs from
# the others'; None: the default is the common one.
MEANINGS = {
    "allow_insecure_remote": ("serve beyond loopback in plaintext", {"ps_server": None, "ps_serve": None}, r"plaintext"),
    "allow_unauthenticated_clients": ("serve TLS beyond loopback without client certificates", {"ps_server": None, "ps_serve": None}, r"authenticates nobody"),
    "batch_size": ("examples per step", {"ps_worker": None, "ps_predict": None}, r"per step"),
    "checkpoints_to_keep": ("the newest checkpoints kept, 0 all", {"ps_worker": None, "ps_admin": "a command run by hand deletes nothing unless asked (0)"}, r"newest"),
    "columns": ("the click log's columns", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"columns in file order"),
    "coordinator": ("the clock coordinator's address", {"ps_worker": None, "ps_admin": None}, r"coordinator"),
    "cpu_threads": ("threads of the model's GEMMs on the CPU", {"ps_worker": None, "ps_predict": "a scorer alone on its machine: auto is every core"}, r"GEMMs"),
    "crosses": ("hashed crosses of categorical fields", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"crosses"),
    "drain_seconds": ("how long a stop on SIGTERM may take", {"ps_server": None, "ps_worker": None}, r"SIGTERM"),
    "etcd": ("the etcd cluster of the job", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"etcd cluster"),
    "etcd_password_file": ("etcd's password", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"password"),
    "etcd_tls_ca": ("etcd's CA", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"etcd"),
    "etcd_tls_cert": ("the certificate for etcd", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"etcd"),
    "etcd_tls_key": ("the key for etcd", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"private key"),
    "etcd_user": ("etcd's user", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"etcd user"),
    "export": ("the export read", {"ps_predict": None, "ps_export_dump": None}, r"[Tt]he export"),
    "export_format": ("an export's weights as fp32 or fp16", {"ps_worker": None, "ps_admin": None}, r"fp32 or fp16"),
    "format": ("the click log's format and delimiter", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"delimiter"),
    "header": ("each file's first line is a header", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"header"),
    "health_listen": ("the plaintext health service's address", {"ps_server": None, "ps_serve": None}, r"health"),
    "huge_pages": ("an export's tables read into memory on transparent huge pages", {"ps_serve": None, "ps_predict": None}, r"read into memory.*huge pages"),
    "job": ("the job under etcd", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"job"),
    "learning_rate": ("a learning rate", {"ps_worker": None, "ps_admin": "set-lr has none: it must be given"}, r"[Ll]earning rate"),
    "listen": ("the address served on", {"ps_server": None, "ps_serve": "its own port (50061), so that both run on one host"}, r"host:port to serve on"),
    "max_bad_lines": ("malformed lines tolerated", {"ps_worker": None, "ps_predict": "each skipped line would shift the scores against their lines (0)"}, r"Malformed lines"),
    "max_keys_per_request": ("the most keys one request carries", {"ps_server": None, "ps_worker": None, "ps_serve": "a Lookup is read-only and answered from memory (2^20)"}, r"[Kk]eys"),
    "max_memory_mb": ("an export's tables read into memory up to this", {"ps_serve": None, "ps_predict": None}, r"into memory"),
    "max_message_mb": ("the largest gRPC message, in MiB", {"ps_server": None, "ps_serve": None}, r"[Ll]argest"),
    "max_values_per_field": ("the most keys a multi column or cross gives a line", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"Most keys"),
    "metrics_listen": ("the Prometheus endpoint's address", {"ps_server": None, "ps_serve": None, "ps_worker": None}, r"Prometheus"),
    "model": ("the model, by its name", {"ps_worker": None, "ps_admin": "the only model the shards hold, when empty"}, r"model"),
    "multi_pooling": ("how a multi column's values pool", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"pool"),
    "multi_separator": ("what separates a multi column's values", {"ps_worker": None, "ps_predict": None, "clicklog_gen": None}, r"separates"),
    "out": ("the file written", {"ps_predict": None, "ps_export_dump": None, "clicklog_gen": None}, r"(go|write)"),
    "read_replicas": ("one replica per shard to read from", {"ps_worker": None, "ps_admin": None}, r"replica of each shard"),
    "rocksdb_block_cache_mb": ("RocksDB's block cache, in MiB", {"ps_server": None, "ps_serve": "serving reads every row through it, with no hot tier in front (256)"}, r"RocksDB's block cache.*in MiB"),
    "rpc_timeout_s": ("the deadline of one call to a shard", {"ps_worker": None, "ps_admin": "a command run by hand gives up sooner (10 s)"}, r"[Dd]eadline"),
    "servers": ("the shards' addresses in shard order", {"ps_worker": None, "ps_admin": None}, r"shard"),
    "tls_ca": ("the CA of TLS", {"ps_server": None, "ps_serve": None, "ps_worker": None, "ps_admin": None}, r"PEM CA"),
    "tls_cert": ("this process's certificate", {"ps_server": None, "ps_serve": None, "ps_worker": None, "ps_admin": None}, r"PEM"),
    "tls_key": ("the key of --tls_cert", {"ps_server": None, "ps_serve": None, "ps_worker": None, "ps_admin": None}, r"private key of --tls_cert"),
    "tls_reload_s": ("how often the TLS files are read again", {"ps_server": None, "ps_serve": None, "ps_worker": None, "ps_admin": None}, r"Re-read"),
    "tls_server_name": ("the name the shards' certificates carry", {"ps_server": None, "ps_worker": None, "ps_admin": None}, r"name"),
    "token_file": ("the shards' admin token", {"ps_worker": None, "ps_admin": None}, r"admin token"),
    "worker_token_file": ("the worker token", {"ps_server": None, "ps_worker": None}, r"token"),
}


def main():
    runfiles = os.path.join(os.environ.get("TEST_SRCDIR", os.getcwd() + "/.."), "parameter_server")
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else runfiles
    defined = {}  # name -> {binary: (default, help)}
    for binary in BINARIES:
        short = binary.rsplit("/", 1)[1]
        for name, default, help_text in flags_of(os.path.join(bin_dir, binary)):
            if help_text.startswith("Deprecated:"):
                continue
            defined.setdefault(name, {})[short] = (default, help_text)
    failures = []
    for name, binaries in sorted(defined.items()):
        if len(binaries) < 2:
            continue
        if name not in MEANINGS:
            failures.append(f"--{name} is defined by {', '.join(sorted(binaries))}: give it one "
                            "meaning in MEANINGS, or another name in one of them")
            continue
        meaning, expected, pattern = MEANINGS[name]
        if set(binaries) != set(expected):
            failures.append(f"--{name} ({meaning}) is defined by {sorted(binaries)}, the table says "
                            f"{sorted(expected)}: does it mean {meaning} in each?")
            continue
        for binary, (default, help_text) in binaries.items():
            if not re.search(pattern, help_text):
                failures.append(f"{binary} --{name}: its help does not say {meaning} "
                                f"(/{pattern}/): {help_text}")
        common = {default for binary, (default, _) in binaries.items() if expected[binary] is None}
        if len(common) > 1:
            failures.append(f"--{name}: defaults {sorted(common)} differ with no reason given")
    for name in MEANINGS:
        if len(defined.get(name, {})) < 2:
            failures.append(f"--{name} is in MEANINGS but fewer than two binaries define it")
    for failure in failures:
        print("FAIL:", failure, file=sys.stderr)
    if failures:
        sys.exit(1)
    shared = sum(1 for b in defined.values() if len(b) > 1)
    print(f"{shared} flag names shared between binaries, one meaning each")


if __name__ == "__main__":
    main()
