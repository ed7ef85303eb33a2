#!/usr/bin/python3
"""The wide_deep model of ps_worker, written in PyTorch for the CPU.

Same inputs (Criteo TSV; each categorical hashed with XXH3-64 seeded by its
field, as model/input/features.h does; integers as log1p(max(x, 0))), same model
(per-key scalar wide weights + dense weights + bias, plus an MLP over the
concatenated per-key embeddings and dense features), same batch size, same
optimizers (Adagrad lr 0.05, initial accumulator 0.1 for the embeddings and
wide weights, Adam lr 0.001 for the MLP; sparse rows see the gradient of the
summed loss), one epoch. Keys index a hashed table of --buckets rows (the
usual PyTorch approach; collisions are possible where ps_server has none).

PyTorch runs on every core this process may use (--threads overrides; the
count is printed on stderr and in the JSON): the peer a user would pick. Parsing
is timed apart from training. Prints one JSON object.

    torch_train.py --train train.tsv --test test.tsv [--model wide_deep|deepfm|lr]
    torch_train.py --train train.tsv --test test.tsv --model_spec SPEC \
        --proto_dir DIR

With --model_spec, the model is the spec (`ps_worker --print_model_spec=NAME`
prints a built-in's), built by tests/bench/torch_model.py's Graph, which
computes each layer from docs/models.md's math independently of the C++
graph: each table hashed into --buckets rows (XXH3 seeded by the column)
with the table's own dim, init and optimizer (Adagrad or SGD), the dense
tensors initialised as ps_worker does and trained with the spec's dense
optimizer (Adam); a zero hyper-parameter means base/optimizer.h's default,
as on the servers. The label is column 0; fields (single-valued, no
crosses or bucketized columns) and dense groups read the columns the spec
names; a field of a column in --multi_columns (a multi or seq column,
'|'-separated) pools its values (of a seq column, with max_length, its
max_length most recent), a sequence its max_length most recent
values, most recent first, masked. A spec of tasks reads each task's label
from --label_columns (NAME=COLUMN,...), and the loss is the sum of the
tasks' loss_weight times their cross-entropy; the JSON gives each task's
AUC under "tasks". DIR holds
model_spec_pb2.py and ps_pb2.py (protoc --python_out).
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch
import xxhash

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402

FIELDS, DENSE = 26, 13


def parse(path, buckets):
    labels, dense, keys = [], [], []
    with open(path) as lines:
        for line in lines:
            columns = line.rstrip("\n").split("\t")
            if len(columns) != 1 + DENSE + FIELDS or columns[0] not in ("0", "1"):
                continue
            labels.append(float(columns[0]))
            dense.append([math.log1p(max(int(c), 0)) if c else 0.0 for c in columns[1:1 + DENSE]])
            keys.append([xxhash.xxh3_64_intdigest(c.encode(), seed=f) % buckets
                         for f, c in enumerate(columns[1 + DENSE:])])
    return (torch.tensor(labels), torch.tensor(dense, dtype=torch.float32),
            torch.tensor(keys, dtype=torch.int64))


def parse_for_spec(path, spec, buckets, label_columns, multi_columns, shared):
    """Labels (tasks x lines), each field's and sequence's buckets per line
    (with masks for the multi-valued ones), each dense group's raw columns."""
    # A multi-valued field: its values, padded to the longest any line has
    # (max_length, or --multi_columns' limit of 1000).
    fields = [(f.name, f.column,
               f.max_length or (1000 if f.column in multi_columns else 0))
              for f in spec.field]
    sequences = [(s.name, s.column, s.max_length) for s in spec.sequence]
    groups = [(g.name, list(g.columns)) for g in spec.dense]
    width = 1 + max([c for _, c, _ in fields + sequences] +
                    [c for _, cs in groups for c in cs] + label_columns)
    labels = [[] for _ in label_columns]
    keys = {n: [] for n, _, _ in fields + sequences}
    masks = {n: [] for n, _, length in fields + sequences if length > 0}
    dense = {n: [] for n, _ in groups}

    def bucket(value, column):
        seed = shared.get(column, column)  # a seq:F column hashes as F's
        return xxhash.xxh3_64_intdigest(value.encode(), seed=seed) % buckets

    with open(path) as lines:
        for line in lines:
            columns = line.rstrip("\n").split("\t")
            if len(columns) < width or any(columns[c] not in ("0", "1") for c in label_columns):
                continue
            for t, c in enumerate(label_columns):
                labels[t].append(float(columns[c]))
            for name, column, length in fields:
                if length == 0:
                    keys[name].append(bucket(columns[column], column))
                    continue
                # A seq column's most recent values; none: the missing value.
                values = [v for v in columns[column].split("|") if v][-length:] or [""]
                keys[name].append([bucket(v, column) for v in values])
                masks[name].append([1.0] * len(values))
            for name, column, length in sequences:
                values = [v for v in columns[column].split("|") if v][::-1][:length]
                keys[name].append([bucket(v, column) for v in values] +
                                  [bucket("", column)] * (length - len(values)))
                masks[name].append([1.0] * len(values) + [0.0] * (length - len(values)))
            for name, cs in groups:
                dense[name].append([float(columns[c]) if columns[c] else 0.0 for c in cs])
    # Multi-valued fields padded to their longest list.
    for name, _, length in fields:
        if length == 0:
            continue
        longest = max((len(k) for k in keys[name]), default=1)
        keys[name] = [k + [0] * (longest - len(k)) for k in keys[name]]
        masks[name] = [m + [0.0] * (longest - len(m)) for m in masks[name]]
    return (torch.tensor(labels),
            {n: torch.tensor(v, dtype=torch.int64) for n, v in keys.items()},
            {n: torch.tensor(v, dtype=torch.float32) for n, v in dense.items()},
            {n: torch.tensor(v, dtype=torch.float32) for n, v in masks.items()})


class SpecModel(torch.nn.Module):
    """A model spec over hashed tables (tests/bench/torch_model.py)."""

    def __init__(self, spec, pb2, buckets):
        super().__init__()
        self.source = torch_model.HashedTables(spec, pb2, buckets)
        self.graph = torch_model.Graph(spec, pb2, self.source)

    def forward(self, keys, dense, masks=None):
        self.source.set_batch(keys, dense, masks)
        return self.graph.forward(len(next(iter(keys.values()))))


def spec_optimizers(spec, model, proto_dir):
    """Each table's optimizer over its rows; the spec's dense optimizer.
    Zero fields take base/optimizer.h's defaults, as the servers do."""
    sys.path.insert(0, proto_dir)
    from proto import ps_pb2
    kinds = ps_pb2.OptimizerSpec
    sparse = []
    for table in spec.table:
        o = table.optimizer
        rows = [model.source.tables[table.name].weight]
        if o.kind == kinds.ADAGRAD:
            sparse.append(torch.optim.Adagrad(
                rows, lr=o.learning_rate or 0.05,
                initial_accumulator_value=o.initial_accumulator or 0.1,
                eps=o.epsilon or 1e-10))
        elif o.kind == kinds.SGD:
            sparse.append(torch.optim.SGD(rows, lr=o.learning_rate or 0.01))
        else:
            raise ValueError("table %s: only SGD and ADAGRAD tables train here" % table.name)
    d = spec.dense_optimizer
    if d.kind != kinds.ADAM:
        raise ValueError("the dense optimizer must be ADAM here")
    dense_params = list(model.source.parameters_by_name.values())
    adam = torch.optim.Adam(dense_params, lr=d.learning_rate or 0.001,
                            betas=(d.beta1 or 0.9, d.beta2 or 0.999), eps=d.epsilon or 1e-8)
    return sparse, adam, dense_params


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    scores, labels = scores[order], labels[order]
    ranks = np.empty(len(scores))
    i = 0
    while i < len(scores):
        j = i
        while j < len(scores) and scores[j] == scores[i]:
            j += 1
        ranks[i:j] = (i + 1 + j) / 2.0
        i = j
    positives = labels.sum()
    negatives = len(labels) - positives
    return float((ranks[labels > 0.5].sum() - positives * (positives + 1) / 2) / (positives * negatives))


class Model(torch.nn.Module):
    def __init__(self, kind, buckets, dim, hidden):
        super().__init__()
        self.kind = kind
        self.wide = torch.nn.Embedding(buckets, 1, sparse=True)
        torch.nn.init.zeros_(self.wide.weight)
        self.dense_linear = torch.nn.Linear(DENSE, 1)
        torch.nn.init.zeros_(self.dense_linear.weight)
        torch.nn.init.zeros_(self.dense_linear.bias)
        if kind != "lr":
            self.embedding = torch.nn.Embedding(buckets, dim, sparse=True)
            torch.nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
            layers, width = [], FIELDS * dim + DENSE
            for out in hidden:
                layers += [torch.nn.Linear(width, out), torch.nn.ReLU()]
                width = out
            layers.append(torch.nn.Linear(width, 1))
            self.mlp = torch.nn.Sequential(*layers)

    def forward(self, keys, dense):
        logit = self.wide(keys).sum(dim=(1, 2)) + self.dense_linear(dense).squeeze(1)
        if self.kind != "lr":
            vectors = self.embedding(keys)  # batch x fields x dim
            x = torch.cat([vectors.flatten(1), dense], dim=1)
            logit = logit + self.mlp(x).squeeze(1)
            if self.kind == "deepfm":
                sum_v = vectors.sum(1)
                logit = logit + 0.5 * (sum_v * sum_v - (vectors * vectors).sum(1)).sum(1)
        return logit


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--model", default="wide_deep")
    parser.add_argument("--model_spec", help="train this spec instead of --model")
    parser.add_argument("--proto_dir", help="with --model_spec: protoc --python_out's dir")
    parser.add_argument("--multi_columns", default="",
                        help="with --model_spec: columns of several values "
                             "('|'-separated: multi and seq), comma-separated")
    parser.add_argument("--shared_keys", default="",
                        help="with --model_spec: SEQ=COLUMN, comma-separated: "
                             "seq column SEQ lists COLUMN's values (seq:F) and "
                             "hashes them as COLUMN's")
    parser.add_argument("--label_columns", default="",
                        help="with a spec of tasks: NAME=COLUMN per label")
    parser.add_argument("--batch_size", type=int, default=4096)
    parser.add_argument("--embedding_dim", type=int, default=16)
    parser.add_argument("--hidden", default="256,128")
    parser.add_argument("--buckets", type=int, default=1 << 23)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="intra-op threads (default: every core this "
                             "process may run on)")
    parser.add_argument("--seed", type=int, default=1,
                        help="PyTorch's seed: the initial parameters")
    parser.add_argument("--bf16", action="store_true",
                        help="autocast the forward pass to bfloat16 (oneDNN), "
                             "as ps_worker --bf16 rounds its GEMM inputs")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    print(f"torch_train: {torch.get_num_threads()} threads", file=sys.stderr)
    torch.manual_seed(args.seed)

    start = time.perf_counter()
    if args.model_spec:
        if not args.proto_dir:
            parser.error("--model_spec needs --proto_dir")
        spec, pb2 = torch_model.load_spec(open(args.model_spec).read(), args.proto_dir)
        args.model = spec.name or args.model_spec
        named = dict(item.split("=") for item in args.label_columns.split(",") if item)
        label_columns = [int(named[t.label]) for t in spec.task] or [0]
        loss_weights = [t.loss_weight or 1.0 for t in spec.task] or [1.0]
        tasks = [t.name for t in spec.task] or ["label"]
        multi_columns = {int(c) for c in args.multi_columns.split(",") if c}
        shared = {int(a): int(b) for a, b in
                  (item.split("=") for item in args.shared_keys.split(",") if item)}
        labels, keys, dense, masks = parse_for_spec(args.train, spec, args.buckets,
                                                    label_columns, multi_columns, shared)
        test_labels, test_keys, test_dense, test_masks = parse_for_spec(
            args.test, spec, args.buckets, label_columns, multi_columns, shared)
        model = SpecModel(spec, pb2, args.buckets)
        sparse_optimizers, dense_optimizer, dense_params = spec_optimizers(spec, model, args.proto_dir)

        def rows(data, begin, end):
            return {n: v[begin:end] for n, v in data.items()}
    else:
        labels, dense, keys = parse(args.train, args.buckets)
        test_labels, test_dense, test_keys = parse(args.test, args.buckets)
        model = Model(args.model, args.buckets, args.embedding_dim,
                      [int(h) for h in args.hidden.split(",")])
        sparse = [p for n, p in model.named_parameters()
                  if n in ("wide.weight", "embedding.weight")]
        dense_params = [p for n, p in model.named_parameters()
                        if n not in ("wide.weight", "embedding.weight")]
        sparse_optimizers = [torch.optim.Adagrad(sparse, lr=0.05, initial_accumulator_value=0.1)]
        dense_optimizer = torch.optim.Adam(dense_params, lr=0.001)

        def rows(data, begin, end):
            return data[begin:end]
        labels, test_labels = labels.unsqueeze(0), test_labels.unsqueeze(0)
        masks = test_masks = {}
        loss_weights, tasks = [1.0], ["label"]
    parse_seconds = time.perf_counter() - start
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")

    start = time.perf_counter()
    examples = labels.shape[1]

    def run(model_keys, model_dense, model_masks):
        if args.model_spec:
            return model(model_keys, model_dense, model_masks)
        return model(model_keys, model_dense).reshape(1, -1)

    for begin in range(0, examples, args.batch_size):
        end = min(begin + args.batch_size, examples)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logit = run(rows(keys, begin, end), rows(dense, begin, end),
                        rows(masks, begin, end) if masks else None)
        loss = sum(w * loss_fn(logit[t].float(), labels[t, begin:end])
                   for t, w in enumerate(loss_weights))
        for optimizer in sparse_optimizers:
            optimizer.zero_grad()
        dense_optimizer.zero_grad()
        loss.backward()
        # Adam sees the batch mean, as in ps_worker (it is scale-invariant
        # up to epsilon; the division keeps it exact).
        for p in dense_params:
            p.grad /= (end - begin)
        for optimizer in sparse_optimizers:
            optimizer.step()
        dense_optimizer.step()
    train_seconds = time.perf_counter() - start

    with torch.no_grad():
        probabilities = torch.cat([
            torch.sigmoid(run(rows(test_keys, b, b + 65536), rows(test_dense, b, b + 65536),
                              rows(test_masks, b, b + 65536) if test_masks else None))
            for b in range(0, test_labels.shape[1], 65536)], dim=1).numpy()
    per_task = []
    for t, name in enumerate(tasks):
        y = test_labels[t].numpy()
        p = np.clip(probabilities[t], 1e-7, 1 - 1e-7)
        per_task.append({"task": name, "test_auc": round(auc(probabilities[t], y), 6),
                         "test_logloss": round(float(
                             -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()), 6)})
    result = {
        "model": args.model,
        "examples": int(examples),
        "parse_seconds": round(parse_seconds, 3),
        "train_seconds": round(train_seconds, 3),
        "examples_per_sec": round(examples / train_seconds, 1),
        "test_auc": per_task[0]["test_auc"],
        "test_logloss": per_task[0]["test_logloss"],
        "tasks": per_task,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": torch.get_num_threads(),
        "bf16": args.bf16,
        "blas": torch.__config__.show().count("OpenBLAS") > 0 and "openblas" or "other",
    }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
