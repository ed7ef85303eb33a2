#!/usr/bin/python3
"""Draws loss and AUC against examples from ps_worker's per-interval metrics.

    deploy/plot_metrics.py OUT.png worker0.intervals.jsonl [worker1.intervals.jsonl ...]

Each input is the JSON-lines file a worker writes with --interval_metrics_out.
Needs Debian's python3-matplotlib (deploy/setup.sh installs it).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, inputs = argv[1], argv[2:]
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
    loss_axis.set_xlabel("examples (this worker)")
    loss_axis.set_ylabel("training logloss")
    auc_axis.set_xlabel("examples (this worker)")
    auc_axis.set_ylabel("AUC")
    for axis in (loss_axis, auc_axis):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
