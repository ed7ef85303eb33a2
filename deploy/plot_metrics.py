#!/usr/bin/python3
"""Draws loss and AUC against examples from ps_worker's per-interval metrics.

    deploy/plot_metrics.py OUT.png [--truth=SUMMARY.json] \\
        worker0.intervals.jsonl [worker1.intervals.jsonl ...]

Each input is the JSON-lines file a worker writes with --interval_metrics_out.
--truth is clicklog_gen's --summary_out for the test set: its truth_auc
(the best AUC any model can reach on it) is drawn as a line on the AUC plot.
Needs Debian's python3-matplotlib (deploy/setup.sh installs it).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402


def count_label(value, _position=None):
    """A count as a person reads it on an axis: 0, 950, 20k, 1.5M."""
    for divisor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= divisor:
            return f"{value / divisor:.4g}{suffix}"
    return f"{value:.4g}"


def draw(inputs, truth=None):
    """The figure and its (loss, AUC) axes for these interval files; `truth`
    is a --summary_out dict or None."""
    figure, (loss_axis, auc_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for path in inputs:
        with open(path) as lines:
            rows = [json.loads(line) for line in lines if line.strip()]
        if not rows:
            continue
        # Named after the worker that wrote it (files from before workers
        # recorded their index: after the file).
        name = f"worker {rows[0]['worker']}" if "worker" in rows[0] else os.path.basename(path)
        examples = [row["examples"] for row in rows]
        loss_axis.plot(examples, [row["loss"] for row in rows], label=name)
        auc_axis.plot(examples, [row["train_auc"] for row in rows], label=name + " (recent train)")
        tested = [row for row in rows if "test_auc" in row]
        if tested:
            auc_axis.plot([row["examples"] for row in tested],
                          [row["test_auc"] for row in tested], "o-", label=name + " (test)")
    if truth and "truth_auc" in truth:
        auc_axis.axhline(truth["truth_auc"], color="black", linestyle="--", linewidth=1,
                         label=f"ground truth's best ({truth['truth_auc']:.4f})")
    loss_axis.set_ylabel("training logloss")
    auc_axis.set_ylabel("AUC")
    for axis in (loss_axis, auc_axis):
        axis.set_xlabel("examples (this worker)")
        axis.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        axis.xaxis.set_major_formatter(FuncFormatter(count_label))
        axis.set_xlim(left=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    return figure, (loss_axis, auc_axis)


def main(argv):
    args = [arg for arg in argv[1:] if not arg.startswith("--truth=")]
    truth_paths = [arg[len("--truth="):] for arg in argv[1:] if arg.startswith("--truth=")]
    if len(args) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    truth = None
    if truth_paths:
        with open(truth_paths[-1]) as f:
            truth = json.load(f)
    figure, _ = draw(args[1:], truth)
    figure.savefig(args[0], dpi=100)
    print("wrote", args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
