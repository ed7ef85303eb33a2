#!/usr/bin/python3
"""deploy/plot_metrics.py: the examples axis has ticks a person reads (20k,
1.5M, never a run of digits), and --truth draws the ground truth's best AUC
as a line. Draws from interval files written here, as a worker writes them.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."), "parameter_server")
SCRIPT = os.path.join(RUNFILES, "deploy/plot_metrics.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import plot_metrics  # noqa: E402

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr)


for value, label in ((0, "0"), (950, "950"), (20000, "20k"), (150000, "150k"),
                     (1500000, "1.5M"), (2e9, "2G")):
    check(plot_metrics.count_label(value) == label,
          f"count_label({value}) is {plot_metrics.count_label(value)!r}, not {label!r}")

work = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
inputs = []
for worker, last in ((0, 2_400_000), (1, 180_000)):
    path = os.path.join(work, f"worker{worker}.intervals.jsonl")
    with open(path, "w") as f:
        for step in range(1, 25):
            examples = last * step // 24
            row = {"worker": worker, "examples": examples, "loss": 0.5 - step / 100,
                   "train_auc": 0.6 + step / 100}
            if step % 6 == 0:
                row["test_auc"] = 0.62 + step / 100
            f.write(json.dumps(row) + "\n")
    inputs.append(path)
truth_path = os.path.join(work, "truth.json")
with open(truth_path, "w") as f:
    json.dump({"truth_auc": 0.8123, "truth_logloss": 0.41}, f)

for paths in ([inputs[0]], [inputs[1]], inputs):
    figure, (loss_axis, auc_axis) = plot_metrics.draw(paths, {"truth_auc": 0.8123})
    figure.canvas.draw()
    for axis in (loss_axis, auc_axis):
        labels = [t.get_text().replace("\u2212", "-") for t in axis.get_xticklabels()
                  if t.get_text()]
        check(len(labels) >= 3, f"{paths}: only {labels} on the examples axis")
        for label in labels:
            check(re.fullmatch(r"\d{1,3}(\.\d{1,2})?[kMG]?", label) is not None,
                  f"{paths}: examples tick {label!r} is not a count a person reads")
        check(axis.xaxis.get_offset_text().get_text() == "",
              f"{paths}: the examples axis has an offset or exponent")
    truth_lines = [line for line in auc_axis.get_lines()
                   if "ground truth" in line.get_label()]
    check(len(truth_lines) == 1 and set(truth_lines[0].get_ydata()) == {0.8123},
          f"{paths}: no ground-truth line at 0.8123")

# The command line: --truth read from the summary, the PNG written.
out = os.path.join(work, "training.png")
done = subprocess.run([sys.executable, SCRIPT, out, f"--truth={truth_path}"] + inputs,
                      capture_output=True, text=True)
check(done.returncode == 0 and os.path.getsize(out) > 10000,
      f"plot_metrics.py exited {done.returncode}: {done.stderr}")
with open(out, "rb") as f:
    check(f.read(8) == b"\x89PNG\r\n\x1a\n", "training.png is not a PNG")

if failures:
    sys.exit(1)
print("examples ticks readable; ground-truth line drawn")
