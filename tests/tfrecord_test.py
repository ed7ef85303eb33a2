#!/usr/bin/python3
"""--format=tfrecord against files written here, by code of this test's own:
the TFRecord framing with a CRC32C computed bit by bit (not the reader's
RocksDB one) and tf.Example's protobuf bytes encoded by hand.

clicklog_gen's lines become records (label, I1..I13 as int64, C1..C26 as
bytes, an empty value left out), plain and gzip'd; a worker trained on the
records must match, to the last digit, one trained on the lines (one
worker, --staleness=0: the same examples in the same order), and
ps_predict must score the records as it scores the lines. A record whose
data CRC is wrong and a file cut inside a record are bad records, counted,
with their byte offsets in the log; records followed as they arrive
(--follow) train every record; a gzip'd file cut short loses its
last records, counted once, and training goes on.
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."), "parameter_server")
WORK = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
failures = []


def fail(message):
    failures.append(message)
    print("FAIL:", message, file=sys.stderr)


def binary(path):
    return os.path.join(RUNFILES, path)


def crc32c(data):
    """CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit."""
    crc = 0xffffffff
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff


def varint(value):
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7f
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def feature(values):
    """A Feature: int64_list (3) for ints, bytes_list (1) for bytes."""
    if all(isinstance(v, int) for v in values):
        packed = b"".join(varint(v) for v in values)
        return field(3, field(1, packed))
    return field(1, b"".join(field(1, v) for v in values))


def example(features):
    """A tf.Example: features (1) holding a map<string, Feature> (1)."""
    entries = b"".join(field(1, field(1, name.encode()) + field(2, feature(values)))
                       for name, values in features.items())
    return field(1, entries)


def frame(record):
    length = struct.pack("<Q", len(record))
    return (length + struct.pack("<I", masked(crc32c(length))) + record +
            struct.pack("<I", masked(crc32c(record))))


COLUMNS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]


def records_of(tsv):
    """Each line as one framed tf.Example; the frames' offsets."""
    frames = []
    with open(tsv) as f:
        for line in f:
            values = line.rstrip("\n").split("\t")
            features = {}
            for name, value in zip(COLUMNS, values):
                if value == "":
                    continue  # left out: the reader reads it as empty
                features[name] = [int(value)] if name[0] in "lI" else [value.encode()]
            frames.append(frame(example(features)))
    return frames


def run(argv, what, log):
    with open(os.path.join(WORK, log), "w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=WORK)
    if done.returncode != 0:
        with open(os.path.join(WORK, log)) as f:
            sys.exit(f"FAIL: {what} exited {done.returncode}:\n{f.read()[-3000:]}")


def train(name, train_files, test_files, layout_flags):
    """Trains on a shard of its own; the worker's --metrics_out.
    `train_files` is --train's value, or a list of flags for the source."""
    source = train_files if isinstance(train_files, list) else [f"--train={train_files}"]
    with open(f"{WORK}/shard-{name}.log", "w") as shard_log:
        server = subprocess.Popen([binary("server/ps_server"), "--listen=127.0.0.1:0",
                                   f"--data_dir={WORK}/shard-{name}"],
                                  stdout=subprocess.PIPE, stderr=shard_log, text=True)
    try:
        shard = server.stdout.readline().split()[-1]
        run([binary("worker/ps_worker"), "--servers=" + shard] + source + [
             f"--test={test_files}", "--batch_size=500", "--hidden=16", "--embedding_dim=4",
             "--staleness=0", "--cpu_threads=1", f"--metrics_out={WORK}/{name}.json",
             "--max_bad_lines=5", "--export_every_s=3600",
             f"--export_dir={WORK}/{name}-exports"] + layout_flags,
            f"ps_worker ({name})", f"{name}.log")
    finally:
        server.kill()
        server.wait()
    with open(f"{WORK}/{name}.json") as f:
        return json.load(f)


gen = binary("worker/datagen/clicklog_gen")
for name, lines, seed in (("train", 6000, 1), ("test", 1000, 2)):
    subprocess.run([gen, f"--out={WORK}/{name}.tsv", f"--lines={lines}",
                    f"--sample_seed={seed}"], check=True, stderr=subprocess.DEVNULL)
train_frames = records_of(f"{WORK}/train.tsv")
test_frames = records_of(f"{WORK}/test.tsv")
with open(f"{WORK}/train.tfrecord", "wb") as f:
    f.write(b"".join(train_frames))
with gzip.open(f"{WORK}/test.tfrecord.gz", "wb") as f:
    f.write(b"".join(test_frames))
tfrecord_flags = ["--format=tfrecord", "--columns=" + ",".join(
    ["label"] + [f"dense:I{i}" for i in range(1, 14)] + [f"cat:C{i}" for i in range(1, 27)])]

lines = train("lines", f"{WORK}/train.tsv", f"{WORK}/test.tsv", [])
records = train("records", f"{WORK}/train.tfrecord", f"{WORK}/test.tfrecord.gz",
                tfrecord_flags)
for key in ("examples", "test_examples", "test_auc", "test_logloss", "bad_lines"):
    if lines.get(key) != records.get(key):
        fail(f"{key}: {lines.get(key)} from lines, {records.get(key)} from records")
if lines.get("examples") != 6000:
    fail(f"trained on {lines.get('examples')} examples, not 6000")

# ps_predict: the records' model scores its records as the lines'
# model scores the lines (each its own layout, from its export).
scores = {}
for name, data, flags in (("lines", "test.tsv", []),
                          ("records", "test.tfrecord.gz", [])):
    exports = sorted(os.listdir(f"{WORK}/{name}-exports"))
    run([binary("worker/predict/ps_predict"), f"--export={WORK}/{name}-exports/{exports[-1]}",
         f"--input={WORK}/{data}", f"--out={WORK}/{name}.scores"] + flags,
        f"ps_predict ({name})", f"predict-{name}.log")
    with open(f"{WORK}/{name}.scores") as f:
        scores[name] = f.read().split()
if len(scores["lines"]) != 1000 or scores["lines"] != scores["records"]:
    fail(f"ps_predict: {scores['lines'][:3]} from lines, {scores['records'][:3]} from records")
# The records' model reads lines when told their columns, and refuses to
# guess them.
records_export = f"{WORK}/records-exports/" + sorted(os.listdir(f"{WORK}/records-exports"))[-1]
run([binary("worker/predict/ps_predict"), f"--export={records_export}",
     f"--input={WORK}/test.tsv", f"--out={WORK}/crossed.scores", "--format=tsv",
     "--columns=label,dense*13,cat*26"], "ps_predict (records' model, lines)",
    "predict-crossed.log")
with open(f"{WORK}/crossed.scores") as f:
    if f.read().split() != scores["records"]:
        fail("the records' model scores the lines otherwise than the records")
refused = subprocess.run([binary("worker/predict/ps_predict"), f"--export={records_export}",
                          f"--input={WORK}/test.tsv", "--format=tsv"],
                         capture_output=True, text=True)
if refused.returncode != 64 or "give --columns" not in refused.stderr:
    fail(f"--format=tsv alone on a TFRecord model: exit {refused.returncode}, "
         f"{refused.stderr[-300:]}")

# Records where features meet: followed as they arrive (--follow), two
# files of half the records each, each scored before it trains.
os.makedirs(f"{WORK}/hourly")
for hour, part in enumerate((train_frames[:3000], train_frames[3000:])):
    with open(f"{WORK}/hourly/hour-{hour}.tfrecord", "wb") as f:
        f.write(b"".join(part))
    open(f"{WORK}/hourly/hour-{hour}.tfrecord.done", "w").close()
followed = train("followed", [f"--follow={WORK}/hourly", "--follow_until=hour-1.tfrecord",
                              "--follow_poll_ms=100"],
                 f"{WORK}/test.tfrecord.gz", tfrecord_flags)
files = followed.get("followed_files", [])
if followed.get("examples") != 6000 or len(files) != 2 or followed.get("bad_lines") != 0:
    fail(f"--follow over records: {followed.get('examples')} examples, {len(files)} files, "
         f"{followed.get('bad_lines')} bad")

# A gzip'd file cut short: its last records are lost, counted once, and
# training goes on.
cut = gzip.compress(b"".join(train_frames))
with open(f"{WORK}/cut.tfrecord.gz", "wb") as f:
    f.write(cut[:len(cut) - 200])
cut_run = train("cut", f"{WORK}/cut.tfrecord.gz", f"{WORK}/test.tfrecord.gz",
                tfrecord_flags)
if cut_run.get("bad_lines") != 1 or not 5000 < cut_run.get("examples", 0) < 6000:
    fail(f"cut gzip file: {cut_run.get('bad_lines')} bad records, "
         f"{cut_run.get('examples')} examples")

# Damage: record 7's data CRC, and the file cut inside its last record.
offsets = [0]
for data in train_frames:
    offsets.append(offsets[-1] + len(data))
damaged = bytearray(b"".join(train_frames))
damaged[offsets[8] - 1] ^= 0x01
damaged = damaged[:offsets[-1] - 3]
with open(f"{WORK}/damaged.tfrecord", "wb") as f:
    f.write(bytes(damaged))
bad = train("damaged", f"{WORK}/damaged.tfrecord", f"{WORK}/test.tfrecord.gz",
            tfrecord_flags)
with open(f"{WORK}/damaged.log", errors="replace") as f:
    log = f.read()
if bad.get("bad_lines") != 2 or bad.get("examples") != 5998:
    fail(f"damaged file: {bad.get('bad_lines')} bad records, {bad.get('examples')} examples")
for offset, why in ((offsets[7], "data fails its CRC"),
                    (offsets[-2], "ends inside a record")):
    if f"damaged.tfrecord at byte {offset}: skipped malformed record" not in log \
            or why not in log:
        fail(f"the log does not name byte {offset} ({why})")

if failures:
    for name in ("lines", "records", "followed", "cut", "damaged"):
        with open(f"{WORK}/{name}.log", errors="replace") as f:
            sys.stderr.write(f"--- {name}.log\n{f.read()[-1500:]}\n")
    sys.exit(1)
print(f"6000 records train as 6000 lines (test AUC {records['test_auc']}); "
      "ps_predict scores alike; damaged records counted at their offsets")
