#!/usr/bin/python3
"""Sizes a cluster on paper from measured rates and a sample of a click log.

Two parts:
1. The key-frequency curve of a sample (Criteo TSV): distinct keys, how many
   are seen once, and how many rows the hot tier must hold for a given hit
   rate; from it memory, disk and bytes per step.
2. A throughput projection to hundreds of shards and workers from the
   measured per-shard service rates, per-worker compute rate and bytes per
   step, at a stated network bandwidth; with where the model stops holding.

    capacity.py --sample train.tsv --measured measured.json [--bandwidth_gbit 25]

measured.json: {"pull_rows_per_sec": .., "push_rows_per_sec": .., "worker_compute_examples_per_sec": ..,
                "dense_params": .., "embedding_dim": ..}
"""
import argparse
import collections
import json
import math

import xxhash

FIELDS, DENSE = 26, 13


def key_frequencies(path, lines):
    counts = collections.Counter()
    unique_per_batch = []
    batch_keys = set()
    n = 0
    with open(path) as f:
        for line in f:
            columns = line.rstrip("\n").split("\t")
            if len(columns) != 1 + DENSE + FIELDS:
                continue
            for field, value in enumerate(columns[1 + DENSE:]):
                key = xxhash.xxh3_64_intdigest(value.encode(), seed=field)
                counts[key] += 1
                batch_keys.add(key)
            n += 1
            if n % 4096 == 0:
                unique_per_batch.append(len(batch_keys))
                batch_keys = set()
            if n >= lines:
                break
    return n, counts, unique_per_batch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sample", required=True)
    parser.add_argument("--lines", type=int, default=500000)
    parser.add_argument("--measured", required=True)
    parser.add_argument("--bandwidth_gbit", type=float, default=25.0,
                        help="network bandwidth per machine, each way")
    parser.add_argument("--total_lines", type=float, default=4e9,
                        help="lines of the full click log, to extrapolate rows")
    args = parser.parse_args()
    measured = json.load(open(args.measured))
    dim = measured["embedding_dim"]
    # Adagrad rows: weights + accumulators, plus the wide table's 1 + 1.
    row_value_bytes = (dim * 2 + 2) * 4
    # Two hot-tier rows' overhead: a 32-byte slot header and ~8 bytes of
    # index each (embedding/row_cache.h).
    row_memory_bytes = row_value_bytes + 2 * 40

    n, counts, unique_per_batch = key_frequencies(args.sample, args.lines)
    accesses = sum(counts.values())
    frequencies = sorted(counts.values(), reverse=True)
    once = sum(1 for c in frequencies if c == 1)
    print(f"### Key frequency ({n} sample lines, {accesses} key accesses)\n")
    print(f"- distinct keys: {len(counts)} ({len(counts) / accesses:.1%} of accesses); "
          f"seen once: {once} ({once / len(counts):.1%} of keys)")
    unique = sum(unique_per_batch) / max(1, len(unique_per_batch))
    print(f"- unique keys per batch of 4096: {unique:.0f} ({unique / (4096 * FIELDS):.1%} of slots)")
    # Growth: distinct keys of a Zipf-like source grow roughly like
    # lines^alpha; estimate alpha from the sample's two halves.
    half = n // 2
    _, half_counts, _ = key_frequencies(args.sample, half)
    alpha = math.log(len(counts) / len(half_counts)) / math.log(n / half)
    rows_full = len(counts) * (args.total_lines / n) ** alpha
    print(f"- distinct keys grow like lines^{alpha:.2f}; at {args.total_lines:.0e} lines: "
          f"~{rows_full:.2e} rows, {rows_full * (row_value_bytes + 16) * 1.2 / 1e9:.0f} GB on "
          f"disk (RocksDB, x1.2 for indexes and levels)")
    print("\n| hot-tier hit rate | rows in the hot tier (sample) | hot-tier memory (sample) |")
    print("| --- | --- | --- |")
    cumulative, index = 0, 0
    for target in (0.5, 0.8, 0.9, 0.95, 0.99):
        while index < len(frequencies) and cumulative < target * accesses:
            cumulative += frequencies[index]
            index += 1
        print(f"| {target:.0%} | {index} ({index / len(counts):.1%} of keys) | "
              f"{index * row_memory_bytes / 2**20:.1f} MiB |")
    print("\nThe same fraction of a larger log's keys gives the same hit rate only if its "
          "curve has the same shape; measure on a sample of your own data.")

    # --- throughput projection -------------------------------------------------
    pull_rate = measured["pull_rows_per_sec"]
    push_rate = measured["push_rows_per_sec"]
    compute = measured["worker_compute_examples_per_sec"]
    dense = measured["dense_params"]
    rows_per_example = unique / 4096  # distinct rows touched per example
    # Per example: pull and push each row of two tables (embedding + wide),
    # with 8-byte keys; plus the dense parameters once per 4096-example step
    # each way.
    bytes_per_example = rows_per_example * (2 * 8 + (dim + 1) * 4) * 2 + dense * 4 * 2 / 4096
    # A shard spends 1/pull_rate per row pulled and 1/push_rate per row pushed,
    # for 2 tables.
    shard_seconds_per_example = rows_per_example * 2 * (1 / pull_rate + 1 / push_rate)
    bandwidth = args.bandwidth_gbit * 1e9 / 8
    print(f"\n### Throughput projection\n")
    print(f"Measured on this machine: one shard serves {pull_rate / 1e6:.2f} M rows/s pulled and "
          f"{push_rate / 1e6:.2f} M rows/s pushed; a worker computes {compute:.0f} examples/s; "
          f"{rows_per_example:.2f} distinct rows per example; {bytes_per_example / 1e3:.1f} kB on "
          f"the wire per example; network {args.bandwidth_gbit:g} Gbit/s per machine.\n")
    print("| shards | workers | limit: workers' compute | limit: shards' service | "
          "limit: shards' network | limit: workers' network | projected examples/s | bound by |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for shards, workers in ((1, 1), (2, 2), (4, 4), (16, 16), (64, 64), (128, 256), (256, 512)):
        limits = {
            "compute": workers * compute,
            "service": shards / shard_seconds_per_example,
            "shard network": shards * bandwidth / bytes_per_example,
            "worker network": workers * bandwidth / bytes_per_example,
        }
        bound = min(limits, key=limits.get)
        print(f"| {shards} | {workers} | {limits['compute']:.3g} | {limits['service']:.3g} | "
              f"{limits['shard network']:.3g} | {limits['worker network']:.3g} | "
              f"{limits[bound]:.3g} | {bound} |")
    print("""
Where the projection stops holding:
- **Hot keys.** Rows are spread over 16384 slots by hash, so load is even while
  a shard holds many slots; but the most popular keys (a field with 10 values
  is touched by every example) sit on one shard each. Past a few hundred shards
  the shard holding the hottest slots limits the cluster; the fix is to
  replicate or cache those rows on the workers, which this system does not do yet.
- **Synchronisation.** Under --staleness=0 every step waits for the slowest
  worker, and each worker polls the coordinator; with hundreds of workers the
  tail latency of one step, not the mean rate, sets the pace; use a staleness
  bound of a few steps.
- **Dense parameters.** Every worker pulls and pushes the whole MLP each step
  (a few hundred kB here); this grows with workers x steps/s and lands on every
  shard. Large MLPs want all-reduce among workers instead.
- **Disk.** Rates above are for a hot tier that absorbs the working set; a
  hit rate below ~90% puts RocksDB reads (and with --durability=wal, the
  write-back of a whole stripe whenever a dirty row is evicted) on the
  critical path.
- **Loopback is not a network.** The measured rates come from one 2-core
  machine where clients and servers share the CPUs.""")


if __name__ == "__main__":
    main()
