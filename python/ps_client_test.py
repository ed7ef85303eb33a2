#!/usr/bin/python3
"""ps_client as a user gets it: the wheel pip-installed into a fresh virtual
environment (Debian's grpcio and protobuf from the system site), then used
against a job over mutual TLS: two shards with an admin token, trained by a
worker that exports at its end, and ps_serve serving that export.

Checked against the binaries: tables() against `ps_admin --json tables`,
row() against `ps_admin --json row` for keys of the data the worker
trained on (stored, so the shard that owns them answered: the other one
holds no such row), the slot routing against base/routing_test.cc's
values, stats() against the rows the shards report, predict() against
ps_predict's probabilities of the same lines, predict_examples() of them
hashed here against predict(), lookup() of those keys.
set_learning_rate() is applied with the admin token and refused without
it; a client without a certificate is answered nothing.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."), "parameter_server")
WORK = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
WHEEL = os.path.join(RUNFILES, "python/ps_client-0.1.0-py3-none-any.whl")
processes = []


def fail(message):
    for process in processes:
        process.kill()
    for name in sorted(os.listdir(WORK)):
        if name.endswith(".log"):
            with open(os.path.join(WORK, name), errors="replace") as f:
                sys.stderr.write(f"--- {name}\n{f.read()[-1500:]}\n")
    sys.exit(f"FAIL: {message}")


def binary(path):
    return os.path.join(RUNFILES, path)


def run(argv, what):
    done = subprocess.run(argv, capture_output=True, text=True, cwd=WORK)
    if done.returncode != 0:
        fail(f"{what} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def install():
    """The wheel into a new virtual environment; re-runs this file there."""
    venv = os.path.join(WORK, "venv")
    run([sys.executable, "-m", "venv", "--system-site-packages", venv], "python3 -m venv")
    python = os.path.join(venv, "bin/python")
    run([python, "-m", "pip", "install", "--no-index", "--quiet", WHEEL], "pip install")
    os.execv(python, [python, os.path.abspath(__file__), "--installed"])


def start(name, argv, ready):
    log_path = os.path.join(WORK, name + ".log")
    process = subprocess.Popen(argv, stdout=open(log_path, "w"),
                               stderr=subprocess.STDOUT, cwd=WORK)
    processes.append(process)
    deadline = time.time() + 120
    while time.time() < deadline:
        with open(log_path, errors="replace") as f:
            match = re.search(ready, f.read())
        if match:
            return match.group(1)
        if process.poll() is not None:
            fail(f"{name} exited {process.returncode}")
        time.sleep(0.1)
    fail(f"{name} did not start")


def certificates():
    tls = os.path.join(WORK, "tls")
    os.makedirs(tls)

    def openssl(*args):
        run(["openssl", *args], "openssl " + args[0])
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{tls}/ca.key",
            "-out", f"{tls}/ca.crt", "-subj", "/CN=test-ca", "-days", "1")
    with open(f"{tls}/san.ext", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{tls}/{name}.key",
                "-out", f"{tls}/{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{tls}/{name}.csr", "-CA", f"{tls}/ca.crt",
                "-CAkey", f"{tls}/ca.key", "-CAcreateserial", "-out", f"{tls}/{name}.crt",
                "-days", "1", "-extfile", f"{tls}/san.ext")
    for name in ("admin", "worker"):
        with open(f"{tls}/{name}.token", "w") as f:
            f.write(os.urandom(16).hex() + "\n")
    return tls


def main():
    if "--installed" not in sys.argv:
        install()
    # The package must come from the wheel, not from this file's folder.
    here = {os.path.dirname(os.path.abspath(__file__)),
            os.path.dirname(os.path.realpath(__file__))}
    sys.path = [p for p in sys.path if os.path.realpath(p or ".") not in
                {os.path.realpath(h) for h in here}]
    import ps_client
    if not ps_client.__file__.startswith(os.path.join(WORK, "venv")):
        fail(f"ps_client imported from {ps_client.__file__}, not the installed wheel")

    # base/routing_test.cc's slots.
    for key, slot in ((0, 0), (1, 1509), (2, 5258), (12345, 7505),
                      (0xdeadbeefcafef00d, 4547)):
        if ps_client.slot_for_key(key) != slot:
            fail(f"slot_for_key({key}) is {ps_client.slot_for_key(key)}, not {slot}")

    tls = certificates()
    server_tls = [f"--tls_cert={tls}/server.crt", f"--tls_key={tls}/server.key",
                  f"--tls_ca={tls}/ca.crt"]
    client_tls = [f"--tls_ca={tls}/ca.crt", f"--tls_cert={tls}/client.crt",
                  f"--tls_key={tls}/client.key"]
    shards = [start(f"shard{i}", [binary("server/ps_server"), "--listen=127.0.0.1:0",
                                  f"--shard_index={i}", "--num_shards=2",
                                  f"--data_dir={WORK}/shard{i}",
                                  f"--admin_token_file={tls}/admin.token",
                                  f"--worker_token_file={tls}/worker.token"] + server_tls,
                    r"listening on (\S+)") for i in range(2)]
    servers = ",".join(shards)
    run([binary("worker/datagen/clicklog_gen"), f"--out={WORK}/train.tsv", "--lines=20000",
         "--sample_seed=1"], "clicklog_gen")
    run([binary("worker/datagen/clicklog_gen"), f"--out={WORK}/test.tsv", "--lines=500",
         "--sample_seed=2"], "clicklog_gen")
    run([binary("worker/ps_worker"), f"--servers={servers}", f"--train={WORK}/train.tsv",
         "--batch_size=1000", "--hidden=16", "--embedding_dim=4",
         f"--worker_token_file={tls}/worker.token", f"--token_file={tls}/admin.token",
         "--export_every_s=3600", f"--export_dir={WORK}/exports"] + client_tls, "ps_worker")

    options = ps_client.ChannelOptions(
        tls_ca=f"{tls}/ca.crt", tls_cert=f"{tls}/client.crt", tls_key=f"{tls}/client.key",
        token_file=f"{tls}/admin.token")
    admin = [binary("ops/ps_admin"), f"--servers={servers}", "--json",
             f"--token_file={tls}/admin.token"] + client_tls
    with ps_client.Cluster(shards, options) as cluster:
        # Tables, as ps_admin adds them up.
        tables = cluster.tables()
        expected = json.loads(run(admin + ["tables"], "ps_admin tables"))
        print("ps_admin --json tables:", json.dumps(expected)[:300])
        listed = {t["name"]: t for t in expected["tables"]}
        if sorted(listed) != [t.name for t in tables] or len(tables) < 2:
            fail(f"tables {[t.name for t in tables]}, ps_admin {sorted(listed)}")
        for table in tables:
            if table.dim != listed[table.name]["dim"] or table.rows != listed[table.name]["rows"]:
                fail(f"{table.name}: dim {table.dim}, rows {table.rows}; ps_admin {listed[table.name]}")

        # Stats: each shard answers for itself; both took pushes.
        stats = cluster.stats()
        if [s.shard_index for s in stats] != [0, 1] or min(s.rows_pushed for s in stats) == 0:
            fail(f"stats: {[(s.shard_index, s.rows_pushed) for s in stats]}")

        # The slot map covers every slot; the first line's values are stored
        # rows of the shard it routes them to.
        slot_map = cluster.slot_map()
        covered = sum(r.last - r.first + 1 for r in slot_map.ranges)
        if covered != ps_client.NUM_SLOTS or {r.shard for r in slot_map.ranges} != {0, 1}:
            fail(f"slot map: {slot_map}")
        import xxhash
        embedding = next(t.name for t in tables if t.name.endswith("embedding"))
        with open(f"{WORK}/train.tsv") as f:
            first = f.readline().rstrip("\n").split("\t")
        values = [v for v in first[14:] if v]
        keys = [xxhash.xxh3_64_intdigest(v.encode(), seed=field)
                for field, v in enumerate(first[14:]) if v]
        owners = {cluster.shard_for_key(k, slot_map) for k in keys}
        if owners != {0, 1}:
            fail(f"the first line's {len(keys)} keys are all on shard {owners}")
        for key in keys[:8]:
            row = cluster.row(embedding, key)
            if not row.stored:
                fail(f"key {key} of {embedding} is not stored on shard "
                     f"{cluster.shard_for_key(key)}: routed to the wrong shard?")
            printed = json.loads(run(admin + ["--table=" + embedding, f"--key={key}", "row"],
                                     "ps_admin row"))
            if [round(v, 5) for v in row.values] != [round(v, 5) for v in printed["values"]]:
                fail(f"row {key}: {list(row.values)}, ps_admin {printed}")

        # A call that changes the shards: with the token it is applied on
        # each, without it refused (UNAUTHENTICATED, as ps_admin is).
        before = cluster.set_learning_rate(embedding, 0.0125)
        if [round(rate, 6) for rate in before] != [listed[embedding]["learning_rate"]] * 2:
            fail(f"set_learning_rate answered {before}")
        if abs(next(t for t in cluster.tables()
                    if t.name == embedding).learning_rate - 0.0125) > 1e-8:
            fail("the new learning rate is not what tables() reads")
        tokenless = ps_client.Cluster(shards, tls_ca=f"{tls}/ca.crt",
                                      tls_cert=f"{tls}/client.crt",
                                      tls_key=f"{tls}/client.key")
        try:
            tokenless.set_learning_rate(embedding, 0.5)
            fail("set_learning_rate without the admin token was applied")
        except ps_client.CallError as error:
            if error.code is None or error.code.name != "UNAUTHENTICATED":
                fail(f"without the token: {error}")
        tokenless.close()
        # Without a client certificate, nothing is answered.
        bare = ps_client.Cluster(shards, tls_ca=f"{tls}/ca.crt")
        try:
            bare.stats()
            fail("a client without a certificate was answered")
        except ps_client.CallError as error:
            if error.code is None:
                fail(f"no gRPC code in {error}")
        bare.close()

    # Serving over TLS: the export the worker wrote at its end.
    serve = start("serve", [binary("server/ps_serve"), f"--model_dir={WORK}/exports",
                            "--listen=127.0.0.1:0", "--poll_ms=100"] + server_tls,
                  r"ps_serve listening on (\S+)")
    with open(f"{WORK}/test.tsv") as f:
        lines = f.readlines()[:200]
    exports = sorted(os.listdir(f"{WORK}/exports"))
    run([binary("worker/predict/ps_predict"), f"--export={WORK}/exports/{exports[-1]}",
         f"--input={WORK}/test.tsv", f"--out={WORK}/predicted.txt"], "ps_predict")
    with open(f"{WORK}/predicted.txt") as f:
        expected = [float(line) for line in f.read().split()[:200]]
    with ps_client.Serving(serve, options) as serving:
        deadline = time.time() + 60
        while True:
            try:
                prediction = serving.predict(lines)
                break
            except ps_client.CallError as error:
                if time.time() > deadline or error.code.name != "UNAVAILABLE":
                    fail(str(error))
                time.sleep(0.2)
        got = prediction.probabilities
        if len(got) != 200 or max(abs(a - b) for a, b in zip(got, expected)) > 1e-5:
            fail(f"predict: {got[:3]} vs ps_predict {expected[:3]}")
        if prediction.model_version != exports[-1] or list(prediction.tasks) != ["label"]:
            fail(f"model {prediction.model_version}, tasks {list(prediction.tasks)}")
        # The same lines as features hashed here: the same probabilities.
        examples = []
        for line in lines[:20]:
            values = line.rstrip("\n").split("\t")
            dense = [float(v) if v else 0.0 for v in values[1:14]]
            fields = [[xxhash.xxh3_64_intdigest(v.encode(), seed=field)]
                      for field, v in enumerate(values[14:40])]
            examples.append((dense, fields))
        from_features = serving.predict_examples(examples).probabilities
        if max(abs(a - b) for a, b in zip(from_features, got[:20])) > 1e-6:
            fail(f"predict_examples: {from_features[:3]} vs predict {got[:3]}")
        looked_up = serving.lookup(embedding, keys[:4])
        if not all(looked_up.found) or len(serving.rows(looked_up)) != 4:
            fail(f"lookup of stored keys: {looked_up.found}")
    for process in processes:
        process.kill()
    print(f"ps_client from the wheel: {len(tables)} tables, {len(keys)} keys routed, "
          f"200 lines scored as ps_predict scores them")


if __name__ == "__main__":
    main()
