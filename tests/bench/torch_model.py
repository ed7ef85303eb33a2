#!/usr/bin/python3
"""A model spec (proto/model_spec.proto) built in PyTorch, independently of
the C++ graph: every layer written here from docs/models.md's math.

    torch_model.py --check STEP.json --proto_dir DIR [--tolerance 1e-4]

reads one training step that worker/graph_step_dump ran (the spec, the
batch, the parameters, and the C++ loss and gradients), runs the same step
in PyTorch (float64, on every core), and compares the loss and every
gradient: each table's rows and each dense tensor, by the relative error of
the whole tensor (||torch - c++|| / ||torch||, and the largest element's
error over the largest element). Prints one line per tensor; exits 1 if any
is over the tolerance.

DIR holds model_spec_pb2.py and ps_pb2.py (protoc --python_out).
"""
import argparse
import json
import math
import os
import sys

import torch


def load_spec(text, proto_dir):
    sys.path.insert(0, proto_dir)
    from google.protobuf import text_format
    from proto import model_spec_pb2
    spec = model_spec_pb2.ModelSpec()
    text_format.Parse(text, spec)
    return spec, model_spec_pb2


class Graph:
    """The spec's layers, computed in PyTorch from docs/models.md's math.

    What the layers read comes from `source`: source.rows(table, node, slot)
    is each example's pooled row of a categorical node's slot (B x dim),
    source.tensor(name) a dense tensor, source.dense(group) a dense group's
    transformed values (B x columns)."""

    def __init__(self, spec, pb2, source):
        self.spec, self.pb2, self.source = spec, pb2, source
        self.slots = {}
        for field in spec.field:
            self.slots[field.name] = 1
        for sequence in spec.sequence:
            self.slots[sequence.name] = sequence.max_length
        self.sequences = {s.name for s in spec.sequence}
        for cross in spec.cross:
            self.slots[cross.name] = 1
        self.dense_groups = {}
        for group in spec.dense:
            self.dense_groups[group.name] = group
            if group.transform == pb2.DenseInput.BUCKETIZE:
                self.slots[group.name] = len(group.columns)
        self.layers = {layer.name: layer for layer in spec.layer}

    def forward(self, batch):
        """The logits: tasks x examples (one row without tasks)."""
        values = {}
        for name, group in self.dense_groups.items():
            if group.transform != self.pb2.DenseInput.BUCKETIZE:
                values[name] = self.source.dense(group)
        done = set()

        def run(name):
            if name in done or name not in self.layers:
                return
            layer = self.layers[name]
            for i in layer.inputs:
                run(i)
            values[name] = self.layer(layer, values, batch)
            done.add(name)

        for layer in self.spec.layer:
            run(layer.name)
        outputs = [t.output for t in self.spec.task] or [self.spec.output]
        return torch.stack([values[o].reshape(-1) for o in outputs])

    def rows_of(self, layer, values, batch):
        """fm and dot_interaction: the inputs as a B x k x d stack of rows."""
        table_dims = {t.name: t.dim for t in self.spec.table}
        dims = {table_dims[self.layers[i].embedding.table] for i in layer.inputs
                if i in self.layers and self.layers[i].WhichOneof("kind") == "embedding"}
        if len(dims) > 1:
            raise ValueError(f"{layer.name}: rows of one width, not {sorted(dims)}")
        dim = dims.pop() if dims else values[layer.inputs[0]].shape[1]
        return torch.cat([values[i] for i in layer.inputs], dim=1).reshape(batch, -1, dim)

    def layer(self, layer, values, batch):
        kind = layer.WhichOneof("kind")
        name = layer.name
        tensor = self.source.tensor
        if kind == "embedding":
            parts = []
            for i in layer.inputs:
                for s in range(self.slots[i]):
                    parts.append(self.source.rows(layer.embedding.table, i, s))
            return torch.cat(parts, dim=1)
        if kind == "wide":
            bias = tensor(name + ".bias")
            out = torch.zeros(batch, 1, dtype=bias.dtype)
            for i in layer.inputs:
                if i in self.slots:
                    for s in range(self.slots[i]):
                        out = out + self.source.rows(layer.wide.table, i, s)
                else:
                    out = out + values[i] @ tensor(name + ".dense_weights")
            return out + bias
        if kind == "concat":
            return torch.cat([values[i] for i in layer.inputs], dim=1)
        if kind == "mlp":
            mlp = layer.mlp
            x = values[layer.inputs[0]]
            count = len(mlp.units)
            for l in range(count):
                x = x @ tensor("%s.%d.weights" % (name, l)) + tensor("%s.%d.bias" % (name, l))
                last = l + 1 == count
                relu = (mlp.last_activation == mlp.RELU) if last else (
                    mlp.activation != mlp.NONE)
                if relu:
                    x = torch.relu(x)
            return x
        if kind == "fm":
            v = self.rows_of(layer, values, batch)
            return 0.5 * (v.sum(dim=1) ** 2 - (v ** 2).sum(dim=1)).sum(dim=1, keepdim=True)
        if kind == "dot_interaction":
            v = self.rows_of(layer, values, batch)
            z = v @ v.transpose(1, 2)
            k = v.shape[1]
            offset = 0 if layer.dot_interaction.self_interaction else -1
            rows, cols = torch.tril_indices(k, k, offset=offset)
            return z[:, rows, cols]
        if kind == "cross":
            x0 = values[layer.inputs[0]]
            x = x0
            for l in range(layer.cross.num_layers):
                prefix = "%s.%d" % (name, l)
                if layer.cross.low_rank == 0:
                    u = x @ tensor(prefix + ".weights")
                else:
                    u = (x @ tensor(prefix + ".u")) @ tensor(prefix + ".v")
                x = x0 * (u + tensor(prefix + ".bias")) + x
            return x
        if kind == "add":
            out = values[layer.inputs[0]]
            for i in layer.inputs[1:]:
                out = out + values[i]
            return out
        if kind == "attention_pooling":
            # DIN: an MLP of [q, k, q - k, q * k] per position; masked
            # weights, no softmax; the weighted sum of the keys.
            q = values[layer.inputs[0]]
            keys_layer = self.layers[layer.inputs[1]]
            sequence = keys_layer.inputs[0]
            k = values[layer.inputs[1]].reshape(batch, self.slots[sequence], -1)
            q = q.unsqueeze(1).expand_as(k)
            x = torch.cat([q, k, q - k, q * k], dim=2)
            count = len(layer.attention_pooling.units) + 1
            for l in range(count):
                x = x @ tensor("%s.%d.weights" % (name, l)) + tensor("%s.%d.bias" % (name, l))
                if l + 1 < count:
                    x = torch.relu(x)
            weights = x.squeeze(2) * self.source.mask(sequence)
            return (weights.unsqueeze(2) * k).sum(dim=1)
        if kind == "mmoe":
            # Experts (ReLU on every layer), a softmax gate per task.
            mmoe = layer.mmoe
            x = values[layer.inputs[0]]
            experts = []
            for e in range(mmoe.num_experts):
                h = x
                for l in range(len(mmoe.units)):
                    prefix = "%s.expert%d.%d" % (name, e, l)
                    h = torch.relu(h @ tensor(prefix + ".weights") + tensor(prefix + ".bias"))
                experts.append(h)
            stacked = torch.stack(experts, dim=1)  # B x E x u
            outs = []
            for t in range(mmoe.num_tasks):
                prefix = "%s.gate%d" % (name, t)
                gate = torch.softmax(x @ tensor(prefix + ".weights") + tensor(prefix + ".bias"),
                                     dim=1)
                outs.append((gate.unsqueeze(2) * stacked).sum(dim=1))
            return torch.cat(outs, dim=1)
        if kind == "slice":
            begin = layer.slice.begin
            return values[layer.inputs[0]][:, begin:begin + layer.slice.width]
        raise ValueError("layer %s: unknown kind %s" % (name, kind))


def transform_dense(group, pb2, x):
    """A dense group's transform of its raw columns x (B x columns)."""
    t = group.transform
    if t == pb2.DenseInput.IDENTITY:
        return x
    if t == pb2.DenseInput.STANDARDIZE:
        mean = torch.tensor(list(group.mean), dtype=x.dtype)
        std = torch.tensor(list(group.std), dtype=x.dtype)
        return (x - mean) / std
    return torch.log1p(torch.clamp(x, min=0))


class DumpedStep:
    """A step as worker/graph_step_dump gives it: the batch's rows of each
    table, each example's rows per lookup, the dense tensors (float64)."""

    def __init__(self, spec, pb2, step):
        self.spec, self.pb2, self.step = spec, pb2, step
        self.batch = step["batch"]
        self.tables = {}
        for table in step["tables"]:
            rows = torch.tensor(table["rows"], dtype=torch.float64)
            self.tables[table["name"]] = rows.reshape(-1, table["dim"]).requires_grad_()
        self.tensors = {}
        for tensor in step["tensors"]:
            values = torch.tensor(tensor["values"], dtype=torch.float64)
            size = tensor["rows"] * tensor["cols"]
            # Dense tensors travel padded to whole chunks.
            self.tensors[tensor["name"]] = (
                values[:size].reshape(tensor["rows"], tensor["cols"]).clone().requires_grad_())
        self.lookups = {}
        for lookup in step["lookups"]:
            self.lookups[(lookup["table"], lookup["node"], lookup["slot"])] = lookup["members"]
        self.dense_raw = torch.tensor(step["dense_raw"], dtype=torch.float64).reshape(
            self.batch, -1)
        self.masks = {}
        for sequence, mask in zip(spec.sequence, step.get("sequence_masks", [])):
            self.masks[sequence.name] = torch.tensor(mask, dtype=torch.float64).reshape(
                self.batch, sequence.max_length)
        self.dense_position = {c: i for i, c in enumerate(step["dense_columns"])}
        self.pooling = {}
        for field in spec.field:
            self.pooling[field.name] = field.pooling
        for cross in spec.cross:
            self.pooling[cross.name] = cross.pooling

    def rows(self, table, node, slot):
        members = self.lookups[(table, node, slot)]
        rows = self.tables[table]
        pooling = self.pooling.get(node, self.pb2.Field.SUM)
        out = []
        for member_rows in members:
            picked = rows[member_rows]
            if pooling == self.pb2.Field.MAX:
                out.append(picked.max(dim=0).values)
            elif pooling == self.pb2.Field.MEAN:
                out.append(picked.mean(dim=0))
            else:
                out.append(picked.sum(dim=0))
        return torch.stack(out)

    def tensor(self, name):
        return self.tensors[name]

    def mask(self, sequence):
        return self.masks[sequence]

    def dense(self, group):
        columns = [self.dense_position[c] for c in group.columns]
        return transform_dense(group, self.pb2, self.dense_raw[:, columns])


def widths(spec, pb2):
    """Each node's value width (0 for a categorical input)."""
    width = {}
    slots = {f.name: 1 for f in spec.field}
    slots.update({c.name: 1 for c in spec.cross})
    slots.update({s.name: s.max_length for s in spec.sequence})
    dims = {t.name: t.dim for t in spec.table}
    for group in spec.dense:
        if group.transform == pb2.DenseInput.BUCKETIZE:
            slots[group.name] = len(group.columns)
        else:
            width[group.name] = len(group.columns)
    layers = {layer.name: layer for layer in spec.layer}

    def of(name):
        if name in width or name in slots:
            return width.get(name, 0)
        layer = layers[name]
        kind = layer.WhichOneof("kind")
        inputs = [of(i) for i in layer.inputs]
        if kind == "embedding":
            w = sum(slots[i] for i in layer.inputs) * dims[layer.embedding.table]
        elif kind in ("wide", "fm"):
            w = 1
        elif kind == "concat":
            w = sum(inputs)
        elif kind == "mlp":
            w = layer.mlp.units[-1]
        elif kind == "attention_pooling":
            w = dims[layers[layer.inputs[1]].embedding.table]
        elif kind == "mmoe":
            w = layer.mmoe.num_tasks * layer.mmoe.units[-1]
        elif kind == "slice":
            w = layer.slice.width
        elif kind == "dot_interaction":
            embedding_dims = {dims[layers[i].embedding.table] for i in layer.inputs
                              if i in layers and layers[i].WhichOneof("kind") == "embedding"}
            if len(embedding_dims) > 1:
                raise ValueError(f"{name}: rows of one width, not {sorted(embedding_dims)}")
            dim = embedding_dims.pop() if embedding_dims else inputs[0]
            k = sum(inputs) // dim
            w = k * (k + 1) // 2 if layer.dot_interaction.self_interaction else k * (k - 1) // 2
        else:  # cross, add
            w = inputs[0]
        width[name] = w
        return w

    for layer in spec.layer:
        of(layer.name)
    return width


class HashedTables(torch.nn.Module):
    """A spec's parameters for training in PyTorch: each table as a hashed
    torch.nn.Embedding of `buckets` rows (uniform on +-init_scale, sparse
    gradients), each dense tensor initialised as ps_worker does (Glorot-
    uniform weights, zero biases and wide weights). Reads fields (a
    multi-valued one as its padded buckets and mask, pooled by sum or
    mean), sequences (each position's bucket and the mask) and dense groups,
    without crosses or bucketized columns: set_batch() gives each field's and
    sequence's buckets per example (B, or B x positions), the masks of the
    multi-valued ones, and each dense group's raw columns."""

    def __init__(self, spec, pb2, buckets):
        super().__init__()
        self.pb2 = pb2
        if len(spec.cross) or any(g.transform == pb2.DenseInput.BUCKETIZE for g in spec.dense):
            raise ValueError("training reads fields and dense groups, "
                             "without crosses or bucketized columns")
        self.tables = torch.nn.ModuleDict()
        for table in spec.table:
            embedding = torch.nn.Embedding(buckets, table.dim, sparse=True)
            torch.nn.init.uniform_(embedding.weight, -table.init_scale, table.init_scale)
            self.tables[table.name] = embedding
        width = widths(spec, pb2)
        self.parameters_by_name = torch.nn.ParameterDict()

        def add(name, rows, cols, glorot):
            value = torch.zeros(rows, cols)
            if glorot:
                torch.nn.init.xavier_uniform_(value)
            self.parameters_by_name[name.replace(".", "__")] = torch.nn.Parameter(value)

        for layer in spec.layer:
            kind = layer.WhichOneof("kind")
            input_width = width.get(layer.inputs[0], 0) if layer.inputs else 0
            if kind == "wide":
                for i in layer.inputs:
                    if width.get(i, 0) > 0:
                        add(layer.name + ".dense_weights", width[i], 1, False)
                add(layer.name + ".bias", 1, 1, False)
            elif kind == "mlp":
                zeros = layer.mlp.weight_init == layer.mlp.ZEROS
                for l, units in enumerate(layer.mlp.units):
                    add("%s.%d.weights" % (layer.name, l), input_width, units, not zeros)
                    add("%s.%d.bias" % (layer.name, l), 1, units, False)
                    input_width = units
            elif kind == "attention_pooling":
                units = list(layer.attention_pooling.units) + [1]
                input_width = 4 * width[layer.name]
                for l, out in enumerate(units):
                    add("%s.%d.weights" % (layer.name, l), input_width, out, True)
                    add("%s.%d.bias" % (layer.name, l), 1, out, False)
                    input_width = out
            elif kind == "mmoe":
                mmoe = layer.mmoe
                for e in range(mmoe.num_experts):
                    w = input_width
                    for l, out in enumerate(mmoe.units):
                        prefix = "%s.expert%d.%d" % (layer.name, e, l)
                        add(prefix + ".weights", w, out, True)
                        add(prefix + ".bias", 1, out, False)
                        w = out
                for t in range(mmoe.num_tasks):
                    prefix = "%s.gate%d" % (layer.name, t)
                    add(prefix + ".weights", input_width, mmoe.num_experts, True)
                    add(prefix + ".bias", 1, mmoe.num_experts, False)
            elif kind == "cross":
                rank = layer.cross.low_rank
                for l in range(layer.cross.num_layers):
                    prefix = "%s.%d" % (layer.name, l)
                    if rank == 0:
                        add(prefix + ".weights", input_width, input_width, True)
                    else:
                        add(prefix + ".u", input_width, rank, True)
                        add(prefix + ".v", rank, input_width, True)
                    add(prefix + ".bias", 1, input_width, False)
        self.keys = {}
        self.masks = {}
        self.dense_raw = {}
        self.sequences = {s.name for s in spec.sequence}
        self.mean = {f.name for f in spec.field if f.pooling == pb2.Field.MEAN}

    def set_batch(self, keys, dense_raw, masks=None):
        """keys: field or sequence name -> B bucket indices (B x positions
        for a sequence or a multi-valued field); masks: those -> B x
        positions; dense_raw: group -> B x cols."""
        self.keys, self.dense_raw, self.masks = keys, dense_raw, masks or {}

    def rows(self, table, node, slot):
        keys = self.keys[node]
        if node in self.sequences:
            return self.tables[table](keys[:, slot])
        if keys.dim() == 1:
            return self.tables[table](keys)
        mask = self.masks[node].unsqueeze(2)
        pooled = (self.tables[table](keys) * mask).sum(dim=1)
        return pooled / mask.sum(dim=1) if node in self.mean else pooled

    def mask(self, sequence):
        return self.masks[sequence]

    def tensor(self, name):
        return self.parameters_by_name[name.replace(".", "__")]

    def dense(self, group):
        return transform_dense(group, self.pb2, self.dense_raw[group.name])


def relative_error(reference, candidate):
    reference = reference.reshape(-1)
    candidate = candidate.reshape(-1)
    if reference.numel() != candidate.numel():
        return math.inf
    difference = (candidate - reference).norm().item()
    norm = reference.norm().item()
    if norm == 0:
        return difference
    largest = reference.abs().max().item()
    return max(difference / norm, (candidate - reference).abs().max().item() / largest)


def check(args):
    step = json.load(open(args.check))
    spec, pb2 = load_spec(step["spec"], args.proto_dir)
    model = DumpedStep(spec, pb2, step)
    logits = Graph(spec, pb2, model).forward(model.batch)  # tasks x B
    labels = torch.tensor(step["labels"], dtype=torch.float64).reshape(logits.shape)
    # The sum over the tasks of each one's mean scaled cross-entropy (the
    # scale: an example's weight over the known ones' mean, 0 when its label
    # is unknown, times the task's loss weight; 1 without one).
    scale = step.get("loss_scale") or []
    scale = (torch.tensor(scale, dtype=torch.float64).reshape(logits.shape)
             if scale else torch.ones_like(logits))
    losses = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, labels, reduction="none")
    loss = (scale * losses).sum() / model.batch
    loss.backward()
    failures = 0
    loss_error = abs(loss.item() - step["loss"]) / max(abs(loss.item()), 1e-12)
    results = [("loss", loss_error)]
    for table in step["tables"]:
        grad = model.tables[table["name"]].grad
        if grad is None:
            grad = torch.zeros_like(model.tables[table["name"]])
        results.append(("table " + table["name"],
                        relative_error(grad, torch.tensor(table["grads"], dtype=torch.float64))))
    for tensor in step["tensors"]:
        grad = model.tensors[tensor["name"]].grad
        size = tensor["rows"] * tensor["cols"]
        theirs = torch.tensor(tensor["grads"][:size], dtype=torch.float64)
        results.append((tensor["name"], relative_error(grad, theirs)))
    for name, error in results:
        ok = error <= args.tolerance
        failures += 0 if ok else 1
        print("%-32s %.3g%s" % (name, error, "" if ok else "  OVER %.0e" % args.tolerance))
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", required=True)
    parser.add_argument("--proto_dir", required=True)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    sys.exit(check(args))


if __name__ == "__main__":
    main()
