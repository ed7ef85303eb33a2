#!/usr/bin/python3
"""An export as a TorchScript module (ps_client.torchscript, from the wheel
pip-installed into a fresh virtual environment) scores a click log as
ps_predict scores it, to 1e-5 per probability:

- wide & deep, its export a delta of the one before (the chain read whole);
- DCN-v2; DIN on lines of 12 recent items attending to the 5 most recent
  (and pooling 4); MMoE on lines of two labels;
- a spec file of every other layer and input kind (agreement_spec.pbtxt:
  bucketized and standardized dense groups, MAX and MEAN pooling of multi
  fields, a cross of a multi field, fm, dot interaction, a low-rank cross),
  with a bucket boundary (0.1) that float32 and float64 hold apart and
  lines whose value is exactly it, and an untransformed dense group;
- DeepFM on a CSV with a header, an id, a weight and a skipped column,
  scored from lines without their label (each score beside its id).

Each test file holds values the training file never had, so rows the
export lacks are computed in the module (the initializer) and checked too;
the module's XXH3 of keys is checked against Python's xxhash directly.
Triton's config.pbtxt names the inputs' shapes and the CPU. A module over
--max_mb is refused before it is built, as is a directory that is no
export; a line of the wrong column count is an error naming it; the module
saved loads and answers with plain torch.jit.load.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."), "parameter_server")
WORK = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
WHEEL = os.path.join(RUNFILES, "python/ps_client-0.1.0-py3-none-any.whl")
TOLERANCE = 1e-5
failures = []


def fail(message):
    failures.append(message)
    print("FAIL:", message, file=sys.stderr)


def binary(path):
    return os.path.join(RUNFILES, path)


def run(argv, what, log=None, expect_failure=False):
    done = subprocess.run(argv, capture_output=True, text=True, cwd=WORK)
    if log:
        with open(os.path.join(WORK, log), "w") as f:
            f.write(done.stdout + done.stderr)
    if expect_failure:
        return done
    if done.returncode != 0:
        sys.exit(f"FAIL: {what} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def install():
    """The wheel into a new virtual environment (Debian's torch and xxhash
    from the system site); re-runs this file there."""
    venv = os.path.join(WORK, "venv")
    run([sys.executable, "-m", "venv", "--system-site-packages", venv], "python3 -m venv")
    python = os.path.join(venv, "bin/python")
    run([python, "-m", "pip", "install", "--no-index", "--quiet", WHEEL], "pip install")
    os.execv(python, [python, os.path.abspath(__file__), "--installed"])


def train(name, train_files, test_file, flags):
    """Trains `name` on a shard of its own; the directory of its export. With
    one training file the worker exports when it ends; with two, a full
    export is taken by hand after the first and a delta of it after the
    second, a second apart, so that rows only the first run updated are in
    the full export alone."""
    with open(f"{WORK}/{name}-shard.log", "w") as shard_log:
        server = subprocess.Popen([binary("server/ps_server"), "--listen=127.0.0.1:0",
                                   f"--data_dir={WORK}/{name}-shard"],
                                  stdout=subprocess.PIPE, stderr=shard_log, text=True)
    try:
        shard = server.stdout.readline().split()[-1]
        worker = [binary("worker/ps_worker"), "--servers=" + shard, f"--test={test_file}",
                  "--batch_size=256", "--cpu_threads=1", "--staleness=0"] + flags
        if len(train_files) == 1:
            run(worker + [f"--train={train_files[0]}", "--export_every_s=3600",
                          f"--export_dir={WORK}/{name}-exports"],
                f"ps_worker ({name})", f"{name}-worker.log")
            exports = sorted(os.listdir(f"{WORK}/{name}-exports"))
            return f"{WORK}/{name}-exports/{exports[-1]}"
        admin = [binary("ops/ps_admin"), "--servers=" + shard, "export"]
        run(worker + [f"--train={train_files[0]}"], f"ps_worker ({name})", f"{name}-worker0.log")
        time.sleep(1.1)  # rows carry their update's second; a delta takes those >= its base's
        run(admin + [f"--dir={WORK}/{name}-base"], "ps_admin export", f"{name}-base.log")
        time.sleep(1.1)
        run(worker + [f"--train={train_files[1]}"], f"ps_worker ({name})", f"{name}-worker1.log")
        run(admin + [f"--dir={WORK}/{name}-delta", f"--base={WORK}/{name}-base"],
            "ps_admin export --base", f"{name}-delta.log")
        return f"{WORK}/{name}-delta"
    finally:
        server.kill()
        server.wait()


def manifest_rows(export, table):
    with open(f"{export}/MANIFEST.json") as f:
        manifest = json.load(f)
    return sum(int(t.get("rows", 0)) for t in manifest["tables"] if t["spec"]["name"] == table)


def read_scores(path, with_ids):
    """A scores file's header line (None without one), its probabilities per
    line, and its ids (when `with_ids`: each line's first column)."""
    with open(path) as f:
        lines = f.read().splitlines()
    header = lines[0] if lines and lines[0][:1].isalpha() and not with_ids else None
    rows = [line.split("\t") for line in lines[1 if header else 0:]]
    ids = [row.pop(0) for row in rows] if with_ids else []
    return header, [[float(v) for v in row] for row in rows], ids


def new_values(train_file, test_file, delimiter, kinds):
    """How many categorical values of the test file the training file lacks."""
    def values(path):
        seen = set()
        with open(path) as f:
            for line in f:
                for kind, value in zip(kinds, line.rstrip("\n").split(delimiter)):
                    if kind in ("cat", "multi", "seq"):
                        seen.update((kind, v) for v in value.split("|"))
        return seen
    return len(values(test_file) - values(train_file))


def spec_lines(rng, count, vocabulary):
    """Lines of label,dense*3,cat,cat,multi,multi (some dense values empty,
    the first one 0.1 now and then, some multi values empty or several)."""
    lines = []
    for _ in range(count):
        dense = ["" if rng.random() < 0.1 else "%.2f" % rng.gauss(1, 3) for _ in range(3)]
        if rng.random() < 0.2:
            dense[0] = "0.1"
        cats = [rng.choice("abcdefgh") + str(rng.randrange(vocabulary)) for _ in range(2)]
        multis = ["|".join(rng.choice("pqrstu") + str(rng.randrange(vocabulary // 3))
                           for _ in range(rng.randrange(4))) for _ in range(2)]
        lines.append(",".join([str(int(rng.random() < 0.3))] + dense + cats + multis))
    return "\n".join(lines) + "\n"


def layout_lines(rng, count, vocabulary, labeled=True):
    """A CSV with a header: id,click,weight,ts,price,age,user,item,tags
    (the label left out when not `labeled`)."""
    lines = ["id,click,weight,ts,price,age,user,item,tags"]
    for i in range(count):
        row = [f"r{i}", str(int(rng.random() < 0.3)), rng.choice(["1", "0.5", "2"]),
               str(rng.randrange(10**9)),
               "" if rng.random() < 0.1 else "%.1f" % rng.uniform(0, 50),
               str(rng.randrange(80)), "u" + str(rng.randrange(vocabulary)),
               "i" + str(rng.randrange(vocabulary)),
               "|".join("t" + str(rng.randrange(vocabulary // 2))
                        for _ in range(rng.randrange(4)))]
        if not labeled:
            del row[1]
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"


def run_check(python, code, failure):
    """Runs `code` (which prints ok when its assertions hold) in `python`;
    a failure says `failure` with the end of its output."""
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if done.returncode != 0 or "ok" not in done.stdout:
        fail(f"{failure}: {(done.stdout + done.stderr)[-1500:]}")


def check_hash(python):
    """The module's XXH3 of 8-byte keys against Python's xxhash."""
    check = ("import random, struct, torch, xxhash\n"
             "from ps_client import torchscript as ts\n"
             "rng = random.Random(3)\n"
             "keys = [rng.getrandbits(64) for _ in range(3000)] + [0, 1, 2**63, 2**64 - 1]\n"
             "for seed in (0, 1, 12345, 2**63 + 7, 2**64 - 1):\n"
             "    got = ts.xxh3_of_keys(torch.tensor([ts.signed(k) for k in keys]),\n"
             "                          ts.signed(ts.xxh3_seed_bitflip(seed))).tolist()\n"
             "    want = [ts.signed(xxhash.xxh3_64_intdigest(struct.pack('<Q', k), seed))\n"
             "            for k in keys]\n"
             "    assert got == want, (seed, [k for k, a, b in zip(keys, got, want) if a != b][:3])\n"
             "print('ok')\n")
    run_check(python, check, "XXH3 of keys differs from xxhash's")


def check_history_limits(python):
    """The module's line parsing keeps a history's most recent non-empty
    items up to the trained limit, whatever the multi columns' limit (as
    ps_predict's parser), and refuses a multi column over its own."""
    check = ("import xxhash\n"
             "from ps_client import torchscript as ts\n"
             "layout = {'columns': ['label', 'multi', 'seq'], 'delimiter': '\\t',\n"
             "          'multi_separator': '|', 'key_fields': [0, 1], 'crosses': [],\n"
             "          'label_names': ['label'], 'max_values_per_field': 3,\n"
             "          'max_sequence_values': 5}\n"
             "key = lambda item: xxhash.xxh3_64_intdigest(item, 1)\n"
             "(_, slots, _), = ts._examples(layout, ['1\\ta\\tz|a|b|c||d|e|'], 1)\n"
             "assert slots[1] == [key(x) for x in (b'a', b'b', b'c', b'd', b'e')], slots\n"
             "layout['max_sequence_values'] = 2000\n"
             "(_, slots, _), = ts._examples(layout, ['1\\ta\\t' + '|'.join(['i'] * 1500)], 1)\n"
             "assert len(slots[1]) == 1500\n"
             "try:\n"
             "    ts._examples(layout, ['1\\ta|b|c|d\\ti'], 1)\n"
             "    raise SystemExit('a multi column over its limit was read')\n"
             "except ValueError:\n"
             "    pass\n"
             "print('ok')\n")
    run_check(python, check, "the module's history limits differ from ps_predict's")


def main():
    if "--installed" not in sys.argv:
        install()
    python = sys.executable
    check_hash(python)
    check_history_limits(python)
    gen = binary("worker/datagen/clicklog_gen")
    for prefix, extra in (("", []), ("seq_", ["--sequence_length=12"]),
                          ("tasks_", ["--tasks=2"])):
        for name, lines, seed in (("train", 3000, 1), ("test", 600, 2)):
            run([gen, f"--out={WORK}/{prefix}{name}.tsv", f"--lines={lines}",
                 f"--sample_seed={seed}"] + extra, "clicklog_gen")
    with open(f"{WORK}/train.tsv") as f:
        halves = f.readlines()
    for part, lines in (("a", halves[:1500]), ("b", halves[1500:])):
        with open(f"{WORK}/train_{part}.tsv", "w") as f:
            f.writelines(lines)
    rng = random.Random(7)
    with open(f"{WORK}/spec_train.csv", "w") as f:
        f.write(spec_lines(rng, 3000, 30))
    with open(f"{WORK}/spec_test.csv", "w") as f:
        f.write(spec_lines(rng, 600, 40))  # values the training file lacks
    with open(f"{WORK}/layout_train.csv", "w") as f:
        f.write(layout_lines(rng, 3000, 40))
    test_rng = random.Random(8)
    with open(f"{WORK}/layout_test.csv", "w") as f:
        f.write(layout_lines(test_rng, 600, 60))
    test_rng = random.Random(8)
    with open(f"{WORK}/layout_unlabeled.csv", "w") as f:
        f.write(layout_lines(test_rng, 600, 60, labeled=False))

    # DIN as a spec of 5 recent items of the lines' 12 attended to, and 4
    # pooled into the history field's row: the most recent ones, in order;
    # trained with --max_values_per_field=4, which the export records and
    # both scorers then cut each history to (its 4 most recent items, fewer
    # than the 5 the spec reads).
    din_columns = "--columns=label,dense*13,cat*26,seq:0"
    din_spec = run([binary("worker/ps_worker"), din_columns, "--print_model_spec=din"],
                   "ps_worker --print_model_spec").stdout
    shortened = din_spec.replace("max_length: 50", "max_length: 5").replace(
        'name: "field_26"\n  column: 40\n', 'name: "field_26"\n  column: 40\n  max_length: 4\n')
    if shortened.count("max_length: 5") != 1 or "max_length: 4" not in shortened:
        fail(f"DIN's spec is not as this test shortens it:\n{din_spec}")
    with open(f"{WORK}/din.pbtxt", "w") as f:
        f.write(shortened)
    # The agreement spec with a boundary float32 holds as 0.100000001, a
    # mean of 1.1, and its group "d" untransformed.
    with open(binary("tests/testdata/agreement_spec.pbtxt")) as f:
        spec_text = f.read()
    edited = spec_text.replace("boundaries: 2 ", "boundaries: 0.1 ").replace(
        "mean: 1 ", "mean: 1.1 ").replace(
        'columns: 1 columns: 2 columns: 3 }', 'columns: 1 columns: 2 columns: 3 '
        'transform: IDENTITY }')
    if (edited.count("0.1 ") != 1 or "mean: 1.1 " not in edited or
            "transform: IDENTITY" not in edited):
        fail("agreement_spec.pbtxt is not as this test edits it")
    with open(f"{WORK}/spec.pbtxt", "w") as f:
        f.write(edited)

    criteo = ["label"] + ["dense"] * 13 + ["cat"] * 26
    layout_kinds = ["id", "label", "weight", "skip", "dense", "dense", "cat", "cat", "multi"]
    # name, training files, test file (the workers'), file scored, flags,
    # delimiter, the test file's column kinds
    models = [
        ("wide_deep", ["train_a.tsv", "train_b.tsv"], "test.tsv", "test.tsv",
         ["--model=wide_deep"], "\t", criteo),
        ("dcn_v2", ["train.tsv"], "test.tsv", "test.tsv", ["--model=dcn_v2"], "\t", criteo),
        ("din", ["seq_train.tsv"], "seq_test.tsv", "seq_test.tsv",
         [f"--model_spec={WORK}/din.pbtxt", din_columns, "--max_values_per_field=4"], "\t",
         criteo + ["seq"]),
        ("mmoe", ["tasks_train.tsv"], "tasks_test.tsv", "tasks_test.tsv",
         ["--model=mmoe", "--columns=label:click,label:convert,dense*13,cat*26"], "\t",
         ["label", "label"] + criteo[1:]),
        ("spec", ["spec_train.csv"], "spec_test.csv", "spec_test.csv",
         [f"--model_spec={WORK}/spec.pbtxt", "--format=csv",
          "--columns=label,dense*3,cat,cat,multi,multi"], ",",
         ["label", "dense", "dense", "dense", "cat", "cat", "multi", "multi"]),
        ("layout", ["layout_train.csv"], "layout_test.csv", "layout_unlabeled.csv",
         ["--model=deepfm", "--format=csv", "--header",
          "--columns=" + ",".join(layout_kinds)], ",", layout_kinds),
    ]
    checked = []
    for name, train_files, test_file, scored_file, flags, delimiter, kinds in models:
        unseen = new_values(f"{WORK}/{train_files[0]}", f"{WORK}/{test_file}", delimiter, kinds)
        if unseen == 0:
            fail(f"{name}: the test file has no value the training file lacks")
        export = train(name, [f"{WORK}/{t}" for t in train_files], f"{WORK}/{test_file}", flags)
        module = f"{WORK}/{name}.pt"
        run([python, "-m", "ps_client.torchscript", "build", f"--export={export}",
             f"--out={module}", f"--dump_tool={binary('worker/predict/ps_export_dump')}",
             f"--triton_config={WORK}/{name}-config.pbtxt"],
            f"torchscript build ({name})", f"{name}-build.log")
        run([python, "-m", "ps_client.torchscript", "score", f"--module={module}",
             f"--input={WORK}/{scored_file}", f"--out={WORK}/{name}-torchscript.txt",
             "--batch_size=256"], f"torchscript score ({name})", f"{name}-score.log")
        # Rows looked up on disk, not through the whole-table read the
        # module's rows come from.
        run([binary("worker/predict/ps_predict"), f"--export={export}", "--max_memory_mb=0",
             f"--input={WORK}/{scored_file}", f"--out={WORK}/{name}-ps_predict.txt"],
            f"ps_predict ({name})", f"{name}-predict.log")
        header, ours, our_ids = read_scores(f"{WORK}/{name}-torchscript.txt", name == "layout")
        their_header, theirs, their_ids = read_scores(f"{WORK}/{name}-ps_predict.txt",
                                                      name == "layout")
        if header != their_header or our_ids != their_ids:
            fail(f"{name}: header {header!r} and ids {our_ids[:3]}, ps_predict's "
                 f"{their_header!r} and {their_ids[:3]}")
        if len(ours) != 600 or len(theirs) != 600:
            fail(f"{name}: {len(ours)} and {len(theirs)} lines scored, not 600")
            continue
        worst = max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))
        if any(len(x) != len(y) for x, y in zip(ours, theirs)) or worst > TOLERANCE:
            fail(f"{name}: probabilities differ from ps_predict's by {worst:.3g}")
        spread = max(v for row in theirs for v in row) - min(v for row in theirs for v in row)
        if spread < 0.01:
            fail(f"{name}: every probability alike ({spread:.3g} apart): nothing learned")
        if name == "din":
            # The limit reached the module from the export, not from a flag.
            run([binary("worker/predict/ps_export_dump"), f"--export={export}",
                 f"--out={WORK}/din-dump"], "ps_export_dump (din)", "din-dump.log")
            with open(f"{WORK}/din-dump/model.json") as f:
                kept = json.load(f)["layout"]["max_sequence_values"]
            if kept != 4:
                fail(f"din: the export keeps {kept} values of a history, not the trained 4")
        checked.append(f"{name} {worst:.2g} ({unseen} new values)")
    # The delta holds fewer rows than the model read over its chain: the
    # rest are its base's alone.
    run([binary("worker/predict/ps_export_dump"), f"--export={WORK}/wide_deep-delta",
         f"--out={WORK}/wide_deep-dump"], "ps_export_dump", "wide_deep-dump.log")
    with open(f"{WORK}/wide_deep-dump/model.json") as f:
        model_rows = json.load(f)["tables"][0]["rows"]
    delta = manifest_rows(f"{WORK}/wide_deep-delta", "wide_deep.embedding")
    if not 0 < delta < model_rows:
        fail(f"wide_deep's delta holds {delta} embedding rows, the model {model_rows}")
    checked.append(f"the delta {delta} of {model_rows} rows")

    # Triton's config: the inputs' and output's shapes, on the CPU.
    with open(f"{WORK}/mmoe-config.pbtxt") as f:
        config = f.read()
    for want in ('name: "mmoe"', 'platform: "pytorch_libtorch"', "TYPE_FP64 dims: [ -1, 13 ]",
                 "TYPE_INT64 dims: [ -1, 26, -1 ]", "TYPE_INT64 dims: [ -1, 26 ]",
                 "TYPE_FP32 dims: [ -1, 2 ]", "kind: KIND_CPU"):
        if want not in config:
            fail(f"Triton config lacks {want!r}:\n{config}")
    with open(f"{WORK}/spec-config.pbtxt") as f:
        if "dims: [ -1, 5, -1 ]" not in f.read():  # 4 fields and a cross
            fail("the spec model's Triton config has not 5 slots")

    # The saved module on its own: plain torch.jit.load, no ps_client.
    check = ("import json, torch\n"
             f"m = torch.jit.load('{WORK}/mmoe.pt')\n"
             "dense = torch.zeros(2, 13, dtype=torch.float64)\n"
             "keys = torch.arange(52, dtype=torch.int64).reshape(2, 26, 1)\n"
             "out = m(dense, keys, torch.ones(2, 26, dtype=torch.int64))\n"
             "assert list(out.shape) == [2, 2], out.shape\n"
             "assert ((out > 0) & (out < 1)).all(), out\n"
             "assert json.loads(m.layout())['label_names'] == ['click', 'convert']\n"
             "print(m.tasks())\n")
    done = subprocess.run([python, "-I", "-c", check], capture_output=True, text=True)
    if done.returncode != 0 or "click" not in done.stdout:
        fail(f"torch.jit.load of the module alone: {done.stderr[-1500:]}")

    # Refusals.
    dump_tool = f"--dump_tool={binary('worker/predict/ps_export_dump')}"
    too_big = run([python, "-m", "ps_client.torchscript", "build",
                   f"--export={WORK}/dcn_v2-exports/" +
                   sorted(os.listdir(f"{WORK}/dcn_v2-exports"))[-1],
                   f"--out={WORK}/too_big.pt", "--max_mb=1", dump_tool], "",
                  expect_failure=True)
    if too_big.returncode == 0 or "--max_mb=1" not in too_big.stderr or os.path.exists(
            f"{WORK}/too_big.pt"):
        fail(f"a module over --max_mb: exit {too_big.returncode}, {too_big.stderr[-500:]}")
    no_export = run([python, "-m", "ps_client.torchscript", "build", f"--export={WORK}",
                     f"--out={WORK}/none.pt", dump_tool], "", expect_failure=True)
    if no_export.returncode == 0 or "manifest" not in no_export.stderr.lower():
        fail(f"a directory that is no export: exit {no_export.returncode}, "
             f"{no_export.stderr[-500:]}")
    with open(f"{WORK}/short.tsv", "w") as f:
        f.write("1\t2\t3\n")
    short = run([python, "-m", "ps_client.torchscript", "score", f"--module={WORK}/wide_deep.pt",
                 f"--input={WORK}/short.tsv", f"--out={WORK}/short.txt"], "",
                expect_failure=True)
    if short.returncode == 0 or "line 1: 3 column values, expected 40" not in short.stderr:
        fail(f"a short line: exit {short.returncode}, {short.stderr[-500:]}")

    if failures:
        sys.exit(f"{len(failures)} failures")
    print("TorchScript modules score as ps_predict: " + "; ".join(checked))


if __name__ == "__main__":
    main()
