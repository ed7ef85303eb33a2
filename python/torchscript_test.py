#!/usr/bin/python3
"""An export as a TorchScript module (ps_client.torchscript, from the wheel
pip-installed into a fresh virtual environment) scores a click log as
ps_predict scores it, to 1e-5 per probability: wide & deep, DCN-v2, DIN on
lines of 12 recent items attending to the 5 most recent (and pooling 4),
MMoE on lines of two labels, and a spec file of every other layer and
input kind (tests/testdata/agreement_spec.pbtxt:
bucketized and standardized dense groups, MAX and MEAN pooling of multi
fields, a cross of a multi field, fm, dot interaction, a low-rank cross).
Each test file holds values the training file never had, so rows the
export lacks are computed in the module (the initializer) and checked too.

Triton's config.pbtxt names the inputs' shapes. A module over --max_mb
is refused before it is built, as is a directory
that is no export; a line of the wrong column count is an error naming it;
the module saved loads and answers with plain torch.jit.load.
"""
import os
import random
import subprocess
import sys
import tempfile

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


def train(name, train_file, test_file, flags):
    """Trains `name` on a shard of its own; its export's directory."""
    with open(f"{WORK}/{name}-shard.log", "w") as shard_log:
        server = subprocess.Popen([binary("server/ps_server"), "--listen=127.0.0.1:0",
                                   f"--data_dir={WORK}/{name}-shard"],
                                  stdout=subprocess.PIPE, stderr=shard_log, text=True)
    try:
        shard = server.stdout.readline().split()[-1]
        run([binary("worker/ps_worker"), "--servers=" + shard, f"--train={train_file}",
             f"--test={test_file}", "--batch_size=256", "--cpu_threads=1", "--staleness=0",
             "--export_every_s=3600", f"--export_dir={WORK}/{name}-exports"] + flags,
            f"ps_worker ({name})", f"{name}-worker.log")
    finally:
        server.kill()
        server.wait()
    exports = sorted(os.listdir(f"{WORK}/{name}-exports"))
    return f"{WORK}/{name}-exports/{exports[-1]}"


def read_scores(path):
    with open(path) as f:
        lines = f.read().splitlines()
    header = lines[0] if lines and lines[0][:1].isalpha() else None
    rows = [[float(v) for v in line.split("\t")] for line in lines[1 if header else 0:]]
    return header, rows


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
    some multi values empty or several)."""
    lines = []
    for _ in range(count):
        dense = ["" if rng.random() < 0.1 else "%.2f" % rng.gauss(1, 3) for _ in range(3)]
        cats = [rng.choice("abcdefgh") + str(rng.randrange(vocabulary)) for _ in range(2)]
        multis = ["|".join(rng.choice("pqrstu") + str(rng.randrange(vocabulary // 3))
                           for _ in range(rng.randrange(4))) for _ in range(2)]
        lines.append(",".join([str(int(rng.random() < 0.3))] + dense + cats + multis))
    return "\n".join(lines) + "\n"


def main():
    if "--installed" not in sys.argv:
        install()
    python = sys.executable
    gen = binary("worker/datagen/clicklog_gen")
    for prefix, extra in (("", []), ("seq_", ["--sequence_length=12"]),
                          ("tasks_", ["--tasks=2"])):
        for name, lines, seed in (("train", 3000, 1), ("test", 600, 2)):
            run([gen, f"--out={WORK}/{prefix}{name}.tsv", f"--lines={lines}",
                 f"--sample_seed={seed}"] + extra, "clicklog_gen")
    rng = random.Random(7)
    with open(f"{WORK}/spec_train.csv", "w") as f:
        f.write(spec_lines(rng, 3000, 30))
    with open(f"{WORK}/spec_test.csv", "w") as f:
        f.write(spec_lines(rng, 600, 40))  # values the training file lacks

    # DIN as a spec of 5 recent items of the lines' 12 attended to, and 4
    # pooled into the history field's row: the most recent ones, in order.
    din_columns = "--columns=label,dense*13,cat*26,seq:0"
    din_spec = run([binary("worker/ps_worker"), din_columns, "--print_model_spec=din"],
                   "ps_worker --print_model_spec").stdout
    shortened = din_spec.replace("max_length: 50", "max_length: 5").replace(
        'name: "field_26"\n  column: 40\n', 'name: "field_26"\n  column: 40\n  max_length: 4\n')
    if shortened.count("max_length: 5") != 1 or "max_length: 4" not in shortened:
        fail(f"DIN's spec is not as this test shortens it:\n{din_spec}")
    with open(f"{WORK}/din.pbtxt", "w") as f:
        f.write(shortened)
    criteo = ["label"] + ["dense"] * 13 + ["cat"] * 26
    models = [
        ("wide_deep", "", ["--model=wide_deep"], "\t", criteo),
        ("dcn_v2", "", ["--model=dcn_v2"], "\t", criteo),
        ("din", "seq_", [f"--model_spec={WORK}/din.pbtxt", din_columns], "\t",
         criteo + ["seq"]),
        ("mmoe", "tasks_", ["--model=mmoe",
                            "--columns=label:click,label:convert,dense*13,cat*26"], "\t",
         ["label", "label"] + criteo[1:]),
    ]
    spec = binary("tests/testdata/agreement_spec.pbtxt")
    checked = []
    for name, prefix, flags, delimiter, kinds in models + [
            ("spec", "spec_", [f"--model_spec={spec}", "--format=csv",
                               "--columns=label,dense*3,cat,cat,multi,multi"], ",",
             ["label", "dense", "dense", "dense", "cat", "cat", "multi", "multi"])]:
        suffix = "csv" if name == "spec" else "tsv"
        train_file = f"{WORK}/{prefix}train.{suffix}"
        test_file = f"{WORK}/{prefix}test.{suffix}"
        unseen = new_values(train_file, test_file, delimiter, kinds)
        if unseen == 0:
            fail(f"{name}: the test file has no value the training file lacks")
        export = train(name, train_file, test_file, flags)
        module = f"{WORK}/{name}.pt"
        run([python, "-m", "ps_client.torchscript", "build", f"--export={export}",
             f"--out={module}", f"--dump_tool={binary('worker/predict/ps_export_dump')}",
             f"--triton_config={WORK}/{name}.pbtxt"],
            f"torchscript build ({name})", f"{name}-build.log")
        run([python, "-m", "ps_client.torchscript", "score", f"--module={module}",
             f"--input={test_file}", f"--out={WORK}/{name}-torchscript.txt",
             "--batch_size=256"], f"torchscript score ({name})", f"{name}-score.log")
        run([binary("worker/predict/ps_predict"), f"--export={export}", f"--input={test_file}",
             f"--out={WORK}/{name}-ps_predict.txt"], f"ps_predict ({name})",
            f"{name}-predict.log")
        header, ours = read_scores(f"{WORK}/{name}-torchscript.txt")
        their_header, theirs = read_scores(f"{WORK}/{name}-ps_predict.txt")
        if header != their_header:
            fail(f"{name}: header {header!r}, ps_predict's {their_header!r}")
        if len(ours) != 600 or len(theirs) != 600:
            fail(f"{name}: {len(ours)} and {len(theirs)} lines scored, not 600")
            continue
        worst = max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))
        if any(len(x) != len(y) for x, y in zip(ours, theirs)) or worst > TOLERANCE:
            fail(f"{name}: probabilities differ from ps_predict's by {worst:.3g}")
        spread = max(v for row in theirs for v in row) - min(v for row in theirs for v in row)
        if spread < 0.01:
            fail(f"{name}: every probability alike ({spread:.3g} apart): nothing learned")
        checked.append(f"{name} {worst:.2g} ({unseen} new values)")

    # Triton's config: the inputs' and output's shapes.
    with open(f"{WORK}/mmoe.pbtxt") as f:
        config = f.read()
    for want in ('name: "mmoe"', 'platform: "pytorch_libtorch"', "TYPE_FP64 dims: [ -1, 13 ]",
                 "TYPE_INT64 dims: [ -1, 26, -1 ]", "TYPE_INT64 dims: [ -1, 26 ]",
                 "TYPE_FP32 dims: [ -1, 2 ]"):
        if want not in config:
            fail(f"Triton config lacks {want!r}:\n{config}")
    with open(f"{WORK}/spec.pbtxt") as f:
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
    too_big = run([python, "-m", "ps_client.torchscript", "build",
                   f"--export={WORK}/wide_deep-exports/" +
                   sorted(os.listdir(f"{WORK}/wide_deep-exports"))[-1],
                   f"--out={WORK}/too_big.pt", "--max_mb=1",
                   f"--dump_tool={binary('worker/predict/ps_export_dump')}"],
                  "", expect_failure=True)
    if too_big.returncode == 0 or "--max_mb=1" not in too_big.stderr or os.path.exists(
            f"{WORK}/too_big.pt"):
        fail(f"a module over --max_mb: exit {too_big.returncode}, {too_big.stderr[-500:]}")
    no_export = run([python, "-m", "ps_client.torchscript", "build", f"--export={WORK}",
                     f"--out={WORK}/none.pt",
                     f"--dump_tool={binary('worker/predict/ps_export_dump')}"],
                    "", expect_failure=True)
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
