"""An export (ps_admin export) as a TorchScript module, for serving with
TorchServe, Triton's PyTorch backend or plain torch.jit.load:

    python3 -m ps_client.torchscript build --export=/exports/export-0000000042 \\
        --out=model.pt
    python3 -m ps_client.torchscript score --module=model.pt --input=test.tsv \\
        --out=scores.txt

The module is the model spec's graph in PyTorch with every row of the
export inside it (ps_export_dump writes them out; a delta's chain is
applied). It scores as ps_predict does:

    module(dense, keys, counts) -> probabilities, float32 B x tasks

  dense   float64 B x D: the dense columns' values as a line holds them
          (0 for an empty one), in layout order
  keys    int64 B x S x L: per example and slot (the cat, multi and seq
          fields in layout order, then the crosses) its keys, padded to L
  counts  int64 B x S: how many of each slot's keys are real (at least 1:
          a field with no value holds its missing key)

A key is XXH3-64 of the value's bytes seeded by its field's id (the seq:F
column's F), as an int64 of the same bits; a cross's key hashes the pair of
its fields' keys. encode_lines() computes them from click-log lines in the
model's layout (module.layout() says it, as JSON), with Python's xxhash. A
key the export has no row for gets its table's initial row, computed in the
module exactly as a shard computes it.

Size: the module holds every row (8 bytes of key and 4 per float of each
row, in memory once loaded); build refuses a model over --max_mb (4096 by
default).
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from typing import Dict, Final, List

import torch

MASK64 = (1 << 64) - 1
# XXH3's default secret, bytes 8..23 (the 4-to-8-byte path reads them).
XXH3_SECRET_8 = 0x1cad21f72c81017c
XXH3_SECRET_16 = 0xdb979083e96dd4de
# What seeds a cross's keys, plus its position (model/input/features.h).
CROSS_SEED = 0x63726f7373

# Node kinds, as the module's interpreter dispatches on them.
(EMBEDDING, WIDE, CONCAT, MLP, FM, DOT_INTERACTION, CROSS, ADD, ATTENTION_POOLING,
 MMOE, SLICE) = range(11)
LAYER_KINDS = {"embedding": EMBEDDING, "wide": WIDE, "concat": CONCAT, "mlp": MLP, "fm": FM,
               "dot_interaction": DOT_INTERACTION, "cross": CROSS, "add": ADD,
               "attention_pooling": ATTENTION_POOLING, "mmoe": MMOE, "slice": SLICE}
INPUT_NODE = -1
# Lookup sources.
FIELD_SOURCE, SEQUENCE_SOURCE, BUCKET_SOURCE = range(3)
POOL_SUM, POOL_MEAN, POOL_MAX = range(3)
POOLINGS = {"SUM": POOL_SUM, "MEAN": POOL_MEAN, "MAX": POOL_MAX}
LOG1P, IDENTITY, STANDARDIZE = range(3)
TRANSFORMS = {"LOG1P": LOG1P, "IDENTITY": IDENTITY, "STANDARDIZE": STANDARDIZE}


def signed(value):
    """An unsigned 64-bit value as the int64 of the same bits."""
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def as_float32(values):
    """A spec's float fields (boundaries, means, stds) as the float32 values
    the C++ compares with, widened to float64 (JSON prints them short:
    "0.1" is float32's 0.100000001, not float64's 0.1)."""
    return torch.tensor([float(v) for v in values], dtype=torch.float32).to(torch.float64)


def xxh3_seed_bitflip(seed):
    """What XXH3-64 of 8 bytes xors its input with, for `seed`."""
    seed &= MASK64
    low = seed & 0xffffffff
    swapped = int.from_bytes(low.to_bytes(4, "little"), "big")
    seed ^= swapped << 32
    return ((XXH3_SECRET_8 ^ XXH3_SECRET_16) - seed) & MASK64


@torch.jit.script
def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 values."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


@torch.jit.script
def _rotate_left(x: torch.Tensor, bits: int) -> torch.Tensor:
    return (x << bits) | _shift_right(x, 64 - bits)


@torch.jit.script
def xxh3_of_keys(keys: torch.Tensor, bitflip: int) -> torch.Tensor:
    """XXH3-64 of each int64 key's 8 little-endian bytes, with the seed whose
    xxh3_seed_bitflip() is `bitflip` (int64 arithmetic wraps as uint64's)."""
    mx2 = -0x604de39ae16720db  # 0x9fb21c651e98df25
    h = _rotate_left(keys, 32) ^ bitflip
    h = h ^ (_rotate_left(h, 49) ^ _rotate_left(h, 24))
    h = h * mx2
    h = h ^ (_shift_right(h, 35) + 8)
    h = h * mx2
    return h ^ _shift_right(h, 28)


@torch.jit.script
def initial_rows(keys: torch.Tensor, dim: int, uniform_scale: float,
                 bitflip: int) -> torch.Tensor:
    """Each key's initial row (base/initializer.cc): zeros, or uniform on
    +-uniform_scale when it is not 0. XXH3 of the key seeded by the table's
    seed starts a splitmix64 stream; 24 bits of each draw make a uniform in
    (0, 1)."""
    n = keys.shape[0]
    if uniform_scale == 0.0 or n == 0:
        return torch.zeros(n, dim, dtype=torch.float32)
    golden = -0x61c8864680b583eb  # 0x9e3779b97f4a7c15
    steps = torch.arange(1, dim + 1, dtype=torch.int64) * golden
    z = xxh3_of_keys(keys, bitflip).unsqueeze(1) + steps.unsqueeze(0)
    z = (z ^ _shift_right(z, 30)) * -0x40a7b892e31b1a47  # 0xbf58476d1ce4e5b9
    z = (z ^ _shift_right(z, 27)) * -0x6b2fb644ecceee15  # 0x94d049bb133111eb
    z = z ^ _shift_right(z, 31)
    uniform = (_shift_right(z, 40).to(torch.float32) + 0.5) * (1.0 / 16777216.0)
    return uniform_scale * (2.0 * uniform - 1.0)


class ExportedModule(torch.nn.Module):
    """The graph of an export's model spec over its rows. Built from
    ps_export_dump's output by build_module(); scriptable."""

    # The module-level constants forward() compares with, as TorchScript
    # reads them (Final class attributes).
    INPUT_NODE: Final[int] = INPUT_NODE
    EMBEDDING: Final[int] = EMBEDDING
    WIDE: Final[int] = WIDE
    CONCAT: Final[int] = CONCAT
    MLP: Final[int] = MLP
    FM: Final[int] = FM
    DOT_INTERACTION: Final[int] = DOT_INTERACTION
    CROSS: Final[int] = CROSS
    ADD: Final[int] = ADD
    ATTENTION_POOLING: Final[int] = ATTENTION_POOLING
    MMOE: Final[int] = MMOE
    SLICE: Final[int] = SLICE
    SEQUENCE_SOURCE: Final[int] = SEQUENCE_SOURCE
    BUCKET_SOURCE: Final[int] = BUCKET_SOURCE
    POOL_MEAN: Final[int] = POOL_MEAN
    POOL_MAX: Final[int] = POOL_MAX
    LOG1P: Final[int] = LOG1P
    STANDARDIZE: Final[int] = STANDARDIZE

    model_name: str
    layout_text: str
    task_names: List[str]
    outputs: List[int]
    table_keys: List[torch.Tensor]
    table_rows: List[torch.Tensor]
    table_dims: List[int]
    table_scales: List[float]
    table_bitflips: List[int]
    tensors: Dict[str, torch.Tensor]
    lookup_tables: List[int]
    lookup_sources: List[int]
    lookup_slots: List[int]
    lookup_poolings: List[int]
    lookup_max_lengths: List[int]
    lookup_positions: List[int]
    lookup_missing_keys: List[int]
    lookup_dense_columns: List[int]
    bucket_boundaries: List[torch.Tensor]
    bucket_keys: List[torch.Tensor]
    sequence_nodes: List[int]
    sequence_slots: List[int]
    sequence_missing_keys: List[int]
    sequence_lengths: List[int]
    dense_nodes: List[int]
    dense_columns: List[List[int]]
    dense_transforms: List[int]
    dense_means: List[torch.Tensor]
    dense_stds: List[torch.Tensor]
    node_kinds: List[int]
    node_names: List[str]
    node_inputs: List[List[int]]
    node_lookups: List[List[int]]
    node_ints: List[List[int]]

    def __init__(self, dump_dir):
        super().__init__()
        with open(os.path.join(dump_dir, "model.json")) as f:
            model = json.load(f)
        spec = model["spec"]
        self.model_name = spec.get("name", "") or "model"
        self.layout_text = json.dumps(model["layout"])
        self.task_names = [task["name"] for task in model["tasks"]]
        self.outputs = [task["output"] for task in model["tasks"]]

        def read(name, dtype):
            with open(os.path.join(dump_dir, name), "rb") as f:
                data = bytearray(f.read())
            return torch.frombuffer(data, dtype=dtype) if data else torch.zeros(0, dtype=dtype)

        # Tables: keys sorted (as int64) and their rows.
        self.table_keys = []
        self.table_rows = []
        self.table_dims = []
        self.table_scales = []
        self.table_bitflips = []
        for table in model["tables"]:
            keys = read(table["keys_file"], torch.int64)
            rows = read(table["rows_file"], torch.float32).reshape(-1, table["dim"])
            order = torch.argsort(keys)
            self.table_keys.append(keys[order])
            self.table_rows.append(rows[order])
            self.table_dims.append(table["dim"])
            initializer = table["initializer"]
            # A model spec's tables start uniform (init_scale) or at zero.
            if initializer["kind"] not in ("ZEROS", "UNIFORM"):
                raise ValueError(f"table {table['name']}: initializer {initializer['kind']} "
                                 "(a TorchScript module computes ZEROS and UNIFORM rows)")
            self.table_scales.append(
                float(initializer["scale"]) if initializer["kind"] == "UNIFORM" else 0.0)
            self.table_bitflips.append(signed(xxh3_seed_bitflip(int(initializer["seed"]))))
        self.tensors = {}
        for tensor in model["tensors"]:
            values = read(tensor["file"], torch.float32)
            self.tensors[tensor["name"]] = values.reshape(tensor["rows"], tensor["cols"]).clone()

        # Lookups: where each one's keys are, and how they pool.
        self.lookup_tables = []
        self.lookup_sources = []
        self.lookup_slots = []
        self.lookup_poolings = []
        self.lookup_max_lengths = []
        self.lookup_positions = []
        self.lookup_missing_keys = []
        self.lookup_dense_columns = []
        self.bucket_boundaries = []
        self.bucket_keys = []
        dense_specs = spec.get("dense", [])
        nodes = model["nodes"]
        for lookup in model["lookups"]:
            self.lookup_tables.append(lookup["table"])
            self.lookup_slots.append(lookup["example_slot"])
            self.lookup_poolings.append(POOLINGS[lookup["pooling"]])
            self.lookup_max_lengths.append(lookup["max_length"])
            self.lookup_positions.append(lookup["position"])
            self.lookup_missing_keys.append(signed(int(lookup.get("missing_key", "0"))))
            self.lookup_dense_columns.append(lookup["dense_column"])
            if lookup["example_slot"] < 0:
                self.lookup_sources.append(BUCKET_SOURCE)
                group = dense_specs[nodes[lookup["node"]]["index"]]
                self.bucket_boundaries.append(as_float32(group.get("boundaries", [])))
                self.bucket_keys.append(torch.tensor(
                    [signed(int(k)) for k in lookup["bucket_keys"]], dtype=torch.int64))
            else:
                self.lookup_sources.append(
                    SEQUENCE_SOURCE if lookup["position"] >= 0 else FIELD_SOURCE)
                self.bucket_boundaries.append(torch.zeros(0, dtype=torch.float64))
                self.bucket_keys.append(torch.zeros(0, dtype=torch.int64))
        lookup_of = {(l["table"], l["node"], l["slot"]): i
                     for i, l in enumerate(model["lookups"])}

        # Sequences: their masks' slots.
        self.sequence_nodes = [s["node"] for s in model["sequences"]]
        self.sequence_slots = [s["example_slot"] for s in model["sequences"]]
        self.sequence_missing_keys = [signed(int(s["missing_key"]))
                                                 for s in model["sequences"]]
        self.sequence_lengths = [nodes[s["node"]]["slots"]
                                            for s in model["sequences"]]

        # Dense groups: their columns and transform.
        self.dense_nodes = [g["node"] for g in model["dense_groups"]]
        self.dense_columns = [g["columns"] for g in model["dense_groups"]]
        self.dense_transforms = []
        self.dense_means = []
        self.dense_stds = []
        for g in model["dense_groups"]:
            group = dense_specs[nodes[g["node"]]["index"]]
            self.dense_transforms.append(TRANSFORMS[group.get("transform", "LOG1P")])
            self.dense_means.append(as_float32(group.get("mean", [])))
            self.dense_stds.append(as_float32(group.get("std", [])))

        # The layers, in the plan's order (every node after its inputs).
        layers = spec.get("layer", [])
        self.node_kinds = []
        self.node_names = []
        self.node_inputs = []
        # Per layer: the lookups it reads (embedding, wide), and its
        # integers: the dense inputs (wide); layers, hidden ReLU, last ReLU
        # (mlp); row width, rows, self-interaction (fm, dot_interaction);
        # layers, rank (cross); MLP layers, key width, positions, sequence
        # (attention_pooling); experts, layers, tasks (mmoe); begin, width
        # (slice).
        self.node_lookups = []
        self.node_ints = []
        for n, node in enumerate(nodes):
            self.node_names.append(node["name"])
            self.node_inputs.append(node["inputs"])
            if any(i >= n for i in node["inputs"]):
                raise ValueError(f"node {node['name']}: an input after it")
            if node["kind"] != "layer":
                self.node_kinds.append(INPUT_NODE)
                self.node_lookups.append([])
                self.node_ints.append([])
                continue
            layer = layers[node["index"]]
            kind = next(k for k in LAYER_KINDS if k in layer)
            self.node_kinds.append(LAYER_KINDS[kind])
            config = layer.get(kind, {})
            looked_up, ints = [], []
            if kind in ("embedding", "wide"):
                for i in node["inputs"]:
                    for s in range(nodes[i]["slots"]):
                        looked_up.append(lookup_of[(node["table"], i, s)])
                ints = [i for i in node["inputs"] if nodes[i]["slots"] == 0]
            elif kind == "mlp":
                units = config.get("units", [])
                hidden_relu = config.get("activation", "DEFAULT") != "NONE"
                last_relu = config.get("last_activation", "DEFAULT") == "RELU"
                ints = [len(units), int(hidden_relu), int(last_relu)]
            elif kind in ("fm", "dot_interaction"):
                ints = [node["row_dim"], node["rows"],
                        int(bool(config.get("self_interaction", False)))]
            elif kind == "cross":
                ints = [config.get("num_layers", 0), config.get("low_rank", 0)]
            elif kind == "attention_pooling":
                keys_node = nodes[node["inputs"][1]]
                sequence = keys_node["inputs"][0]
                ints = [len(config.get("units", [])) + 1, node["row_dim"], node["rows"],
                        self.sequence_nodes.index(sequence)]
            elif kind == "mmoe":
                ints = [config.get("num_experts", 0), len(config.get("units", [])),
                        config.get("num_tasks", 0)]
            elif kind == "slice":
                ints = [config.get("begin", 0), config.get("width", 0)]
            self.node_lookups.append(looked_up)
            self.node_ints.append(ints)

    @torch.jit.export
    def layout(self) -> str:
        """The click-log layout the model reads (JSON; encode_lines())."""
        return self.layout_text

    @torch.jit.export
    def tasks(self) -> List[str]:
        """The tasks' names, in the order of the output's columns."""
        return self.task_names

    def rows_of(self, table: int, keys: torch.Tensor) -> torch.Tensor:
        """Each key's row of `table` (its initial row when the export has
        none)."""
        flat = keys.reshape(-1).contiguous()
        sorted_keys = self.table_keys[table]
        rows = self.table_rows[table]
        dim = self.table_dims[table]
        out = torch.empty(flat.shape[0], dim, dtype=torch.float32)
        found = torch.zeros(flat.shape[0], dtype=torch.bool)
        if sorted_keys.shape[0] > 0:
            at = torch.searchsorted(sorted_keys, flat).clamp(max=sorted_keys.shape[0] - 1)
            found = sorted_keys[at] == flat
            out = rows[at]
        missing = torch.nonzero(~found).reshape(-1)
        if missing.shape[0] > 0:
            out[missing] = initial_rows(flat[missing], dim, self.table_scales[table],
                                        self.table_bitflips[table])
        return out.reshape(list(keys.shape) + [dim])

    def pooled(self, l: int, dense: torch.Tensor, keys: torch.Tensor,
               counts: torch.Tensor) -> torch.Tensor:
        """Lookup `l`'s row per example (B x dim)."""
        table = self.lookup_tables[l]
        source = self.lookup_sources[l]
        if source == self.BUCKET_SOURCE:
            column = dense[:, self.lookup_dense_columns[l]].contiguous()
            bucket = torch.bucketize(column, self.bucket_boundaries[l], right=True)
            return self.rows_of(table, self.bucket_keys[l][bucket])
        slot = self.lookup_slots[l]
        slot_keys = keys[:, slot, :]
        count = counts[:, slot]
        if source == self.SEQUENCE_SOURCE:  # most recent first
            missing = self.lookup_missing_keys[l]
            length = torch.where((count == 1) & (slot_keys[:, 0] == missing),
                                 torch.zeros_like(count), count)
            position = self.lookup_positions[l]
            at = (count - 1 - position).clamp(min=0).unsqueeze(1)
            key = torch.where(position < length, slot_keys.gather(1, at).squeeze(1),
                              torch.full_like(count, missing))
            return self.rows_of(table, key)
        width = slot_keys.shape[1]
        place = torch.arange(width, dtype=torch.int64).unsqueeze(0)
        valid = place < count.unsqueeze(1)
        max_length = self.lookup_max_lengths[l]
        if max_length > 0:
            valid = valid & (place >= (count - max_length).unsqueeze(1))
        rows = self.rows_of(table, slot_keys)
        pooling = self.lookup_poolings[l]
        if pooling == self.POOL_MAX:
            return rows.masked_fill(~valid.unsqueeze(2), -math.inf).max(dim=1).values
        summed = (rows * valid.unsqueeze(2).to(torch.float32)).sum(dim=1)
        if pooling == self.POOL_MEAN:
            return summed / valid.sum(dim=1, keepdim=True).to(torch.float32)
        return summed

    def tensor(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def forward(self, dense: torch.Tensor, keys: torch.Tensor,
                counts: torch.Tensor) -> torch.Tensor:
        batch = dense.shape[0]
        dense = dense.to(torch.float64)
        pooled: List[torch.Tensor] = []
        for l in range(len(self.lookup_tables)):
            pooled.append(self.pooled(l, dense, keys, counts))
        values: List[torch.Tensor] = []
        for n in range(len(self.node_kinds)):
            values.append(torch.zeros(0))
        for g in range(len(self.dense_nodes)):
            x = dense[:, self.dense_columns[g]]
            transform = self.dense_transforms[g]
            if transform == self.LOG1P:
                x = torch.log1p(torch.clamp(x, min=0.0))
            elif transform == self.STANDARDIZE:
                x = (x - self.dense_means[g]) / self.dense_stds[g]
            values[self.dense_nodes[g]] = x.to(torch.float32)
        masks: List[torch.Tensor] = []
        for q in range(len(self.sequence_nodes)):
            slot = self.sequence_slots[q]
            count = counts[:, slot]
            length = torch.where(
                (count == 1) & (keys[:, slot, 0] == self.sequence_missing_keys[q]),
                torch.zeros_like(count), count)
            place = torch.arange(self.sequence_lengths[q], dtype=torch.int64).unsqueeze(0)
            masks.append((place < length.unsqueeze(1)).to(torch.float32))
        for n in range(len(self.node_kinds)):
            kind = self.node_kinds[n]
            if kind == self.INPUT_NODE:
                continue
            name = self.node_names[n]
            inputs = self.node_inputs[n]
            ints = self.node_ints[n]
            if kind == self.EMBEDDING:
                values[n] = torch.cat([pooled[l] for l in self.node_lookups[n]], dim=1)
            elif kind == self.WIDE:
                out = torch.zeros(batch, 1) + self.tensor(name + ".bias")
                for l in self.node_lookups[n]:
                    out = out + pooled[l]
                for i in ints:
                    out = out + values[i] @ self.tensor(name + ".dense_weights")
                values[n] = out
            elif kind == self.CONCAT:
                values[n] = torch.cat([values[i] for i in inputs], dim=1)
            elif kind == self.MLP:
                x = values[inputs[0]]
                count = ints[0]
                for layer in range(count):
                    prefix = name + "." + str(layer)
                    x = x @ self.tensor(prefix + ".weights") + self.tensor(prefix + ".bias")
                    relu = ints[2] if layer + 1 == count else ints[1]
                    if relu == 1:
                        x = torch.relu(x)
                values[n] = x
            elif kind == self.FM or kind == self.DOT_INTERACTION:
                v = torch.cat([values[i] for i in inputs], dim=1).reshape(batch, ints[1], ints[0])
                if kind == self.FM:
                    values[n] = 0.5 * (v.sum(dim=1) ** 2 - (v ** 2).sum(dim=1)).sum(
                        dim=1, keepdim=True)
                else:
                    z = v @ v.transpose(1, 2)
                    offset = 0 if ints[2] == 1 else -1
                    index = torch.tril_indices(ints[1], ints[1], offset=offset)
                    values[n] = z[:, index[0], index[1]]
            elif kind == self.CROSS:
                x0 = values[inputs[0]]
                x = x0
                for layer in range(ints[0]):
                    prefix = name + "." + str(layer)
                    if ints[1] == 0:
                        u = x @ self.tensor(prefix + ".weights")
                    else:
                        u = (x @ self.tensor(prefix + ".u")) @ self.tensor(prefix + ".v")
                    x = x0 * (u + self.tensor(prefix + ".bias")) + x
                values[n] = x
            elif kind == self.ADD:
                out = values[inputs[0]]
                for i in inputs[1:]:
                    out = out + values[i]
                values[n] = out
            elif kind == self.ATTENTION_POOLING:
                k = values[inputs[1]].reshape(batch, ints[2], ints[1])
                q = values[inputs[0]].unsqueeze(1).expand_as(k)
                x = torch.cat([q, k, q - k, q * k], dim=2)
                for layer in range(ints[0]):
                    prefix = name + "." + str(layer)
                    x = x @ self.tensor(prefix + ".weights") + self.tensor(prefix + ".bias")
                    if layer + 1 < ints[0]:
                        x = torch.relu(x)
                weights = x.squeeze(2) * masks[ints[3]]
                values[n] = (weights.unsqueeze(2) * k).sum(dim=1)
            elif kind == self.MMOE:
                x = values[inputs[0]]
                experts: List[torch.Tensor] = []
                for e in range(ints[0]):
                    h = x
                    for layer in range(ints[1]):
                        prefix = name + ".expert" + str(e) + "." + str(layer)
                        h = torch.relu(h @ self.tensor(prefix + ".weights") +
                                       self.tensor(prefix + ".bias"))
                    experts.append(h)
                stacked = torch.stack(experts, dim=1)
                outs: List[torch.Tensor] = []
                for t in range(ints[2]):
                    prefix = name + ".gate" + str(t)
                    gate = torch.softmax(x @ self.tensor(prefix + ".weights") +
                                         self.tensor(prefix + ".bias"), dim=1)
                    outs.append((gate.unsqueeze(2) * stacked).sum(dim=1))
                values[n] = torch.cat(outs, dim=1)
            elif kind == self.SLICE:
                values[n] = values[inputs[0]][:, ints[0]:ints[0] + ints[1]]
        logits = torch.stack([values[o].reshape(-1) for o in self.outputs], dim=1)
        return torch.sigmoid(logits)


def build_module(export_dir, dump_tool="ps_export_dump", max_mb=4096):
    """The export at `export_dir` as a scripted module (torch.jit.script),
    its rows written out by `dump_tool` (ps_export_dump) first."""
    scratch = tempfile.mkdtemp(prefix="ps-torchscript-")
    try:
        done = subprocess.run([dump_tool, f"--export={export_dir}", f"--out={scratch}",
                               f"--max_mb={max_mb}"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{dump_tool} exited {done.returncode}: {done.stderr.strip()}")
        return torch.jit.script(ExportedModule(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# What ps_predict reads as a dense value (absl::SimpleAtoi, then
# SimpleAtod): ASCII digits, a sign, a point, an exponent; blanks around.
_DENSE = re.compile(rb"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", re.ASCII)


def _dense_value(raw, where):
    if not raw:
        return 0.0
    value = float(raw) if _DENSE.fullmatch(raw) else math.nan
    if not math.isfinite(value):
        raise ValueError(f"{where}: dense value \"{raw.decode(errors='replace')}\" is not a "
                         "finite number")
    return value


def _examples(layout, lines, first_line):
    """Lines as ps_predict's parser reads them: per line its dense values,
    its slots' keys (fields, then crosses) and its id column's value."""
    import xxhash
    hash64 = xxhash.xxh3_64_intdigest
    columns = layout["columns"]
    delimiter = layout["delimiter"].encode()
    separator = layout["multi_separator"].encode()
    key_fields = layout["key_fields"]
    limit = layout["max_values_per_field"]
    kept = layout["max_sequence_values"]
    label_names = layout["label_names"]
    labels = len(label_names)
    examples = []
    for number, line in enumerate(lines, start=first_line):
        if isinstance(line, str):
            line = line.encode()
        line = line[:-1] if line.endswith(b"\n") else line
        line = line[:-1] if line.endswith(b"\r") else line
        values = line.split(delimiter)
        where = f"line {number}"
        if len(values) not in (len(columns), len(columns) - labels):
            raise ValueError(f"{where}: {len(values)} column values, expected "
                             f"{len(columns)} (or {len(columns) - labels} without the labels)")
        labeled = len(values) == len(columns)
        dense, slots, example_id = [], [], b""
        at = 0
        field = 0
        label = 0
        for column, kind in enumerate(columns, start=1):
            if kind == "label" and not labeled:
                continue
            raw = values[at]
            at += 1
            if kind == "label":
                # A named label may be empty (unknown); a plain one may not.
                unknown_ok = label_names[label] != "label"
                if raw not in (b"0", b"1") and not (unknown_ok and raw == b""):
                    raise ValueError(f"{where}: label {label_names[label]} (column {column}) "
                                     f"must be 0 or 1, got \"{raw.decode(errors='replace')}\"")
                label += 1
            elif kind == "dense":
                dense.append(_dense_value(raw, f"{where}, column {column}"))
            elif kind == "cat":
                slots.append([hash64(raw, field)])
                field += 1
            elif kind in ("multi", "seq"):
                key_field = key_fields[field]
                items = [item for item in raw.split(separator) if item]
                if kind == "seq" and len(items) > kept:
                    items = items[len(items) - kept:]  # the most recent
                keys = [hash64(item, key_field) for item in items]
                if kind == "multi" and len(keys) > limit:
                    raise ValueError(f"{where}: {kind} column {column} has more values than "
                                     f"--max_values_per_field={limit}")
                slots.append(keys or [hash64(b"", key_field)])
                field += 1
            elif kind == "id":
                example_id = raw
        for x, (first, second) in enumerate(layout["crosses"]):
            if len(slots[first]) * len(slots[second]) > limit:
                raise ValueError(f"{where}: cross {first}:{second} gives "
                                 f"{len(slots[first]) * len(slots[second])} keys, more than "
                                 f"--max_values_per_field={limit}")
            slots.append([hash64(struct.pack("<QQ", a, b), CROSS_SEED + x)
                          for a in slots[first] for b in slots[second]])
        examples.append((dense, slots, example_id))
    return examples


def _tensors(examples, dense_columns):
    batch = len(examples)
    slot_count = len(examples[0][1]) if examples else 0
    width = max((len(k) for _, slots, _ in examples for k in slots), default=1)
    flat = []
    for _, slots, _ in examples:
        for slot_keys in slots:
            flat.extend(k - (1 << 64) if k >= 1 << 63 else k for k in slot_keys)
            flat.extend([0] * (width - len(slot_keys)))
    keys = torch.tensor(flat, dtype=torch.int64).reshape(batch, slot_count, width)
    counts = torch.tensor([[len(k) for k in slots] for _, slots, _ in examples],
                          dtype=torch.int64).reshape(batch, slot_count)
    dense = torch.tensor([d for d, _, _ in examples], dtype=torch.float64).reshape(
        batch, dense_columns)
    return dense, keys, counts


def encode_lines(layout, lines, first_line=1):
    """Click-log lines (str or bytes; with or without their label columns)
    in `layout` (module.layout(), parsed) as the module's (dense, keys,
    counts), as ps_predict reads them. ValueError for a line ps_predict
    refuses, naming it (the first is line `first_line`)."""
    dense_columns = sum(1 for kind in layout["columns"] if kind == "dense")
    return _tensors(_examples(layout, lines, first_line), dense_columns)


def _check_lines_layout(layout):
    if layout["tfrecord"]:
        raise ValueError("the model reads TFRecord files, not lines: give the module its "
                         "tensors (see encode_lines())")


def score_lines(module, lines, batch_size=4096, first_line=1):
    """Each line's probabilities (a list per line, one per task) of click-log
    lines in the module's layout (a TorchServe handler's work: see
    docs/reference.md). ValueError naming a line that does not read."""
    return [p for p, _ in _score(module, lines, batch_size, first_line)]


def _score(module, lines, batch_size, first_line):
    """(probabilities, id) per line."""
    layout = json.loads(module.layout())
    _check_lines_layout(layout)
    dense_columns = sum(1 for kind in layout["columns"] if kind == "dense")
    scored = []
    with torch.no_grad():
        for begin in range(0, len(lines), batch_size):
            examples = _examples(layout, lines[begin:begin + batch_size], first_line + begin)
            probabilities = module(*_tensors(examples, dense_columns)).tolist()
            scored.extend(zip(probabilities, (e[2] for e in examples)))
    return scored


def _read_lines(path, header):
    """A click log's lines as bytes, gzip'd or not (by its magic bytes), as
    ps_predict splits them: at "\n" only; its first line left out when the
    layout has a header. Also the number of the first line kept."""
    import gzip
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if header and lines:
        return lines[1:], 2
    return lines, 1


def score_file(module, path, batch_size=4096):
    """score_lines() of a click log's lines, plain or gzip (its header line
    skipped when the layout has one)."""
    layout = json.loads(module.layout())
    _check_lines_layout(layout)
    lines, first = _read_lines(path, layout["header"])
    return score_lines(module, lines, batch_size, first)


def triton_config(module, name):
    """A config.pbtxt for Triton's PyTorch backend serving `module` as
    `name` on the CPU (the module makes its tensors there): its three inputs
    and one output, by position."""
    layout = json.loads(module.layout())
    dense = sum(1 for kind in layout["columns"] if kind == "dense")
    slots = (sum(1 for kind in layout["columns"] if kind in ("cat", "multi", "seq")) +
             len(layout["crosses"]))
    tasks = len(module.tasks())
    if dense == 0 or slots == 0:
        raise ValueError("Triton takes no input of width 0: a model with no dense column "
                         "or no categorical one needs its config written by hand")
    return f"""name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: 0
input [
  {{ name: "INPUT__0" data_type: TYPE_FP64 dims: [ -1, {dense} ] }},
  {{ name: "INPUT__1" data_type: TYPE_INT64 dims: [ -1, {slots}, -1 ] }},
  {{ name: "INPUT__2" data_type: TYPE_INT64 dims: [ -1, {slots} ] }}
]
output [
  {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1, {tasks} ] }}
]
instance_group [ {{ kind: KIND_CPU }} ]
"""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m ps_client.torchscript",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="an export as a TorchScript module")
    build.add_argument("--export", required=True, help="the export (ps_admin export --dir)")
    build.add_argument("--out", required=True, help="the module's file (.pt)")
    build.add_argument("--dump_tool", default="ps_export_dump",
                       help="ps_export_dump's path (default: found on PATH)")
    build.add_argument("--max_mb", type=int, default=4096,
                       help="the most MiB of rows and keys the module may hold")
    build.add_argument("--triton_config", default="",
                       help="also write a config.pbtxt for Triton's PyTorch backend here "
                            "(the model named as the spec)")
    score = commands.add_parser("score", help="score a click log with a module")
    score.add_argument("--module", required=True)
    score.add_argument("--input", required=True, help="a click log in the model's layout")
    score.add_argument("--out", required=True,
                       help="probabilities, one line per input line (for several tasks "
                            "tab-separated under a header line naming them), as ps_predict "
                            "writes them")
    score.add_argument("--batch_size", type=int, default=4096)
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            module = build_module(args.export, args.dump_tool, args.max_mb)
            config = triton_config(module, module.model_name) if args.triton_config else ""
        except (OSError, RuntimeError, ValueError) as error:
            sys.exit(f"ps_client.torchscript: {error}")
        module.save(args.out)
        print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes; tasks "
              f"{', '.join(module.tasks())})")
        if config:
            with open(args.triton_config, "w") as f:
                f.write(config)
            print(f"wrote {args.triton_config}")
        return
    try:
        module = torch.jit.load(args.module)
        layout = json.loads(module.layout())
        _check_lines_layout(layout)
        lines, first = _read_lines(args.input, layout["header"])
        scored = _score(module, lines, args.batch_size, first)
    except (OSError, RuntimeError, ValueError) as error:
        sys.exit(f"ps_client.torchscript: {args.input}: {error}")
    with_id = "id" in layout["columns"]
    with open(args.out, "wb") as out:
        if len(module.tasks()) > 1:
            out.write("\t".join((["id"] if with_id else []) + module.tasks()).encode() + b"\n")
        for probabilities, example_id in scored:
            line = "\t".join("%.9g" % p for p in probabilities).encode()
            out.write((example_id + b"\t" if with_id else b"") + line + b"\n")
    print(f"scored {len(scored)} lines")


if __name__ == "__main__":
    main()
