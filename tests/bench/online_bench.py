#!/usr/bin/python3
"""The online loop measured (tests/bench/online_bench.sh runs it).

Drifting click logs (clicklog_gen --drift) arrive as hourly files in a
directory that one ps_worker follows (--follow) against one ps_server, worker
0 exporting every --export_every seconds (a base, then deltas) into a
directory that ps_serve serves. Each file is delivered once the one before
is trained on and served. For each file from the fifth on, the test AUC of
scoring it (before training on it) with:

  (a) the model frozen after the first two files,
  (b) the newest base written every fourth file (a model refreshed per four
      files),
  (c) what ps_serve served when the file arrived: the newest delta, which
      holds every file before it,
  (d) each line scored by what ps_serve served while the worker trained on
      that line's step (what a request arriving then would have got),

beside training's progressive validation of that file (each example scored
by the model training on it, just before its own step). Also: freshness (a
file's arrival to ps_serve answering with a model that holds it), delta and
base sizes, and ps_serve's Predict lines/s and Lookup rows/s (1 and 4 client
threads, p50/p99) beside ps_predict's lines/s and the worker's training
examples/s. Prints the tables, writes a plot, and prints the markdown section
for BENCHMARKS.md to --section_out.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import grpc


def auc(labels, scores):
    """Exact AUC (ties count half)."""
    pairs = sorted(zip(scores, labels))
    positives = sum(labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        average_rank = (i + j + 1) / 2.0
        rank_sum += average_rank * sum(label for _, label in pairs[i:j])
        i = j
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def labels_of(path):
    with open(path) as f:
        return [int(line.split("\t", 1)[0]) for line in f]


class Cluster:
    def __init__(self, bin_dir, work):
        self.bin, self.work, self.processes = bin_dir, work, []

    def start(self, name, argv, stdout_file=None):
        log = open(os.path.join(self.work, name + ".log"), "w")
        process = subprocess.Popen(argv, stdout=stdout_file or log, stderr=log)
        self.processes.append(process)
        return process

    def start_shard(self, name):
        """A ps_server on a free loopback port over a fresh data dir NAME;
        its address."""
        out = open(os.path.join(self.work, name + ".out"), "w")
        self.start(name, [os.path.join(self.bin, "server/ps_server"),
                          "--listen=127.0.0.1:0", "--shard_index=0",
                          "--num_shards=1",
                          "--data_dir=" + os.path.join(self.work, name + ".data")],
                   out)
        return address_in(os.path.join(self.work, name + ".out"), "ps_server")

    def stop(self):
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def address_in(path, prefix):
    def find():
        try:
            text = open(path).read()
        except FileNotFoundError:
            return None
        match = re.search(prefix + r" listening on (\S+)", text)
        return match.group(1) if match else None
    return wait_for(find, 60, prefix + "'s address")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin_dir", default="bazel-bin")
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--lines_per_file", type=int, default=40000)
    parser.add_argument("--drift", type=float, default=5.0)
    parser.add_argument("--export_every", type=int, default=1)
    parser.add_argument("--base_export_every", type=int, default=8,
                        help="a full export after this many deltas (bounds "
                        "the chain ps_serve reads at each swap)")
    parser.add_argument("--batch_size", type=int, default=1024)
    parser.add_argument("--slow_step_ms", type=int, default=100,
                        help="stretches each file's training over several "
                        "export intervals, as an hour's would be")
    parser.add_argument("--load_seconds", type=float, default=8)
    parser.add_argument("--plot", default="docs/online_bench.png")
    parser.add_argument("--section_out", required=True)
    args = parser.parse_args()
    bin_dir = args.bin_dir
    work = tempfile.mkdtemp(prefix="online_bench.")
    cluster = Cluster(bin_dir, work)
    try:
        run(args, bin_dir, work, cluster)
    except Exception:
        cluster.stop()
        print("online_bench failed; its processes' logs are in " + work,
              file=sys.stderr)
        raise
    cluster.stop()
    shutil.rmtree(work, ignore_errors=True)


def run(args, bin_dir, work, cluster):
    parts, incoming = os.path.join(work, "parts"), os.path.join(work, "incoming")
    exports = os.path.join(work, "exports")
    for d in (parts, incoming, exports):
        os.makedirs(d)
    names = ["hour-%02d.tsv" % f for f in range(args.files)]
    for f, name in enumerate(names):
        subprocess.run([os.path.join(bin_dir, "worker/datagen/clicklog_gen"),
                        "--out=" + os.path.join(parts, name),
                        "--lines=%d" % args.lines_per_file,
                        "--drift=%g" % args.drift,
                        "--first_line=%d" % (f * args.lines_per_file),
                        "--sample_seed=%d" % (100 + f)],
                       check=True, stderr=subprocess.DEVNULL)

    shard = cluster.start_shard("shard")
    serve_out = open(os.path.join(work, "serve.out"), "w")
    cluster.start("serve", [os.path.join(bin_dir, "server/ps_serve"),
                            "--model_dir=" + exports, "--listen=127.0.0.1:0",
                            "--poll_ms=100"], serve_out)
    serve = address_in(os.path.join(work, "serve.out"), "ps_serve")
    metrics = os.path.join(work, "worker.json")
    worker_log = os.path.join(work, "worker.log")
    worker = cluster.start("worker", [
        os.path.join(bin_dir, "worker/ps_worker"), "--servers=" + shard,
        "--worker_index=0", "--num_workers=1", "--follow=" + incoming,
        "--follow_until=" + names[-1], "--follow_poll_ms=50",
        "--staleness=1", "--device=cpu", "--metrics_out=" + metrics,
        "--batch_size=%d" % args.batch_size,
        "--slow_step_ms=%d" % args.slow_step_ms,
        "--export_every_s=%d" % args.export_every, "--export_dir=" + exports,
        "--base_export_every=%d" % args.base_export_every,
        "--exports_to_keep=0"])

    serving_pb2 = generate_messages(work)
    channel = grpc.insecure_channel(serve)
    predict = channel.unary_unary(
        "/ps.Serving/Predict",
        request_serializer=serving_pb2.PredictRequest.SerializeToString,
        response_deserializer=serving_pb2.PredictResponse.FromString)
    probe_line = open(os.path.join(parts, names[0])).readline().rstrip("\n")

    def served():
        try:
            answer = predict(serving_pb2.PredictRequest(lines=[probe_line]),
                             timeout=5)
            return answer.model_version, answer.model_cut
        except grpc.RpcError:
            return None, -1

    def worker_clock():
        out = subprocess.run([os.path.join(bin_dir, "ops/ps_admin"),
                              "--servers=" + shard, "--json", "clocks"],
                             capture_output=True, text=True, check=True).stdout
        workers = json.loads(out)["workers"]
        return workers[0]["clock"] if workers else 0

    served_when_arrived = {}   # file index -> export ps_serve served
    # file index -> (clock when it arrived, [(worker clock, served export)]
    # sampled while it was trained on)
    served_while_training = {}
    freshness = []             # (file, seconds arrival->served, trained->served)
    base_after = {}            # file index -> an export holding files <= it
    for f, name in enumerate(names):
        start_clock = worker_clock()
        if f > 0:
            served_when_arrived[f] = served()[0]
        arrived = time.time()
        shutil.move(os.path.join(parts, name), os.path.join(incoming, name))
        open(os.path.join(incoming, name + ".done"), "w").close()
        samples = []
        waiting = "nothing new after %s; waiting" % name
        deadline = time.time() + 600
        while (waiting not in open(worker_log).read() and
               (f < len(names) - 1 or worker.poll() is None)):
            if time.time() > deadline:
                raise RuntimeError(name + " not trained on in 600 s")
            samples.append((worker_clock(), served()[0]))
        served_while_training[f] = (start_clock, samples)
        if f == len(names) - 1:
            break
        trained = time.time()
        clock = worker_clock()
        wait_for(lambda: served()[1] >= clock, 120, name + " served")
        now = time.time()
        freshness.append((f, now - arrived, now - trained))
        if f == 1 or f % 4 == 3:
            # The model as it stood then (ps_admin export would contend with
            # worker 0's cuts: one cut at a time).
            base_after[f] = os.path.join(exports, served()[0])
    if worker.wait(timeout=600) != 0:
        raise RuntimeError("the worker failed: " + open(worker_log).read()[-3000:])
    summary = json.load(open(metrics))
    progressive = {entry["file"]: entry["progressive_auc"]
                   for entry in summary.get("followed_files", [])}

    def predict(model, path):
        scores_path = os.path.join(work, "scores.txt")
        out = subprocess.run([os.path.join(bin_dir, "worker/predict/ps_predict"),
                              "--export=" + model, "--input=" + path,
                              "--out=" + scores_path],
                             capture_output=True, text=True, check=True).stdout
        scores = [float(x) for x in open(scores_path).read().split()]
        rate = re.search(r"\(([0-9.]+) lines/s\)", out)
        return scores, float(rate.group(1)) if rate else 0.0

    def predict_auc(model, f):
        path = os.path.join(incoming, names[f])
        scores, rate = predict(model, path)
        return auc(labels_of(path), scores), rate

    def served_as_trained_auc(f):
        """Each line scored by the export ps_serve served while the worker
        trained on that line's step (a request for it then would have got
        that one)."""
        path = os.path.join(incoming, names[f])
        lines = open(path).read().splitlines()
        start_clock, samples = served_while_training[f]
        version_of_line = []
        for i in range(len(lines)):
            step = start_clock + i // args.batch_size
            version = served_when_arrived[f]
            for clock, sampled in samples:
                if clock <= step and sampled:
                    version = sampled
            version_of_line.append(version)
        scores = [0.0] * len(lines)
        for version in sorted(set(version_of_line)):
            subset = [i for i, v in enumerate(version_of_line) if v == version]
            subset_path = os.path.join(work, "subset.tsv")
            with open(subset_path, "w") as out:
                out.write("".join(lines[i] + "\n" for i in subset))
            subset_scores, _ = predict(os.path.join(exports, version),
                                       subset_path)
            for i, score in zip(subset, subset_scores):
                scores[i] = score
        return (auc(labels_of(path), scores), len(set(version_of_line)))

    rows = []
    predict_rates = []
    for f in range(4, len(names)):
        frozen, _ = predict_auc(base_after[1], f)
        latest_base = base_after[max(b for b in base_after if b % 4 == 3 and b < f)]
        refreshed, _ = predict_auc(latest_base, f)
        at_arrival, rate = predict_auc(
            os.path.join(exports, served_when_arrived[f]), f)
        predict_rates.append(rate)
        as_trained, versions = served_as_trained_auc(f)
        rows.append((names[f], frozen, refreshed, at_arrival, as_trained,
                     versions, progressive.get(names[f])))
    train_rate = plain_training_rate(bin_dir, work, cluster,
                                     [os.path.join(incoming, n) for n in names])

    sizes = export_sizes(exports)
    load = serving_load(bin_dir, serve, os.path.join(incoming, names[-1]),
                        args.load_seconds)
    write_section(args, train_rate, rows, freshness, sizes, load,
                  predict_rates)


def plain_training_rate(bin_dir, work, cluster, files):
    """Examples/s of a 1 shard + 1 worker run on every file (--train, the
    worker's defaults but --staleness=1), on a fresh shard."""
    shard = cluster.start_shard("plain_shard")
    metrics = os.path.join(work, "plain.json")
    subprocess.run([os.path.join(bin_dir, "worker/ps_worker"),
                    "--servers=" + shard, "--worker_index=0", "--num_workers=1",
                    "--train=" + ",".join(files), "--staleness=1",
                    "--device=cpu", "--metrics_out=" + metrics],
                   check=True, capture_output=True)
    return json.load(open(metrics))["examples_per_sec"]


def generate_messages(work):
    proto_dir = os.path.join(os.getcwd(), "proto")
    out = os.path.join(work, "py")
    os.makedirs(out)
    subprocess.run(["protoc", "-I", proto_dir, "--python_out=" + out,
                    os.path.join(proto_dir, "serving.proto")], check=True)
    sys.path.insert(0, out)
    import serving_pb2  # noqa: E402 (generated above)
    return serving_pb2


def export_sizes(exports):
    """(name, delta_index, rows, bytes) of each export, in order."""
    sizes = []
    for directory in sorted(glob.glob(os.path.join(exports, "export-*"))):
        manifest_path = os.path.join(directory, "MANIFEST.json")
        if not os.path.exists(manifest_path):
            continue
        manifest = json.load(open(manifest_path))
        tables = manifest.get("tables", [])
        sizes.append((os.path.basename(directory),
                      int(manifest.get("delta_index", manifest.get("deltaIndex", 0))),
                      sum(int(t.get("rows", 0)) for t in tables),
                      sum(int(t.get("bytes", 0)) for t in tables)))
    return sizes


def serving_load(bin_dir, serve, lines, seconds):
    results = {}
    tool = os.path.join(bin_dir, "tests/bench/serve_load")
    for clients in (1, 4):
        out = subprocess.run([tool, "--address=" + serve, "--lines=" + lines,
                              "--clients=%d" % clients,
                              "--seconds=%g" % seconds],
                             capture_output=True, text=True, check=True).stdout
        results[("Predict lines", clients)] = json.loads(out)
        out = subprocess.run([tool, "--address=" + serve, "--lines=" + lines,
                              "--clients=%d" % clients,
                              "--seconds=%g" % seconds,
                              "--lookup_table=wide_deep.embedding"],
                             capture_output=True, text=True, check=True).stdout
        results[("Lookup rows", clients)] = json.loads(out)
    return results


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def write_section(args, train_rate, rows, freshness, sizes, load,
                  predict_rates):
    lines = []
    say = lines.append
    say("%d hourly files of %d lines, `clicklog_gen --drift=%g` (new values per field "
        "per 1000 lines), fed to `ps_worker --follow` (1 shard + 1 worker, wide_deep, "
        "`--staleness=1`, batch %d, `--slow_step_ms=%d` so that a file's training "
        "spans several exports), worker 0 exporting every %d s (a base, then deltas, "
        "a base after every %d) into the directory `ps_serve` serves; each file "
        "delivered once the one before is served (`tests/bench/online_bench.sh`, "
        "%s)." % (
            args.files, args.lines_per_file, args.drift, args.batch_size,
            args.slow_step_ms, args.export_every, args.base_export_every,
            time.strftime("%Y-%m-%d")))
    say("")
    say("AUC of scoring each file before training on it: (a) the model frozen after "
        "the first two files, (b) a base export per four files, (c) what ps_serve "
        "served when the file arrived (the newest delta, holding every file before), "
        "(d) each line scored by what ps_serve served while the worker trained on "
        "that line's step (the deltas a request arriving then would have seen; "
        "'exports' is how many served the file), and training's progressive "
        "validation (each example scored by the model at its own step):")
    say("")
    say("| file | (a) frozen | (b) base per 4 files | (c) newest at arrival | "
        "(d) served as it trained | exports | progressive | (d) - progressive |")
    say("| --- | --- | --- | --- | --- | --- | --- | --- |")
    gaps = []
    for name, frozen, refreshed, at_arrival, as_trained, versions, prog in rows:
        gap = as_trained - prog if prog is not None else float("nan")
        gaps.append(gap)
        say("| %s | %.4f | %.4f | %.4f | %.4f | %d | %s | %+.4f |" % (
            name, frozen, refreshed, at_arrival, as_trained, versions,
            "%.4f" % prog if prog is not None else "-", gap))
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    say("| mean | %.4f | %.4f | %.4f | %.4f | | %.4f | %+.4f |" % (
        mean([r[1] for r in rows]), mean([r[2] for r in rows]),
        mean([r[3] for r in rows]), mean([r[4] for r in rows]),
        mean([r[6] for r in rows if r[6] is not None]), mean(gaps)))
    say("")
    say("Freshness: from a file's arrival to ps_serve answering with a model that "
        "holds it, median %.2f s (range %.2f-%.2f); from its last step's "
        "acknowledgement, median %.2f s." % (
            median([x[1] for x in freshness]), min(x[1] for x in freshness),
            max(x[1] for x in freshness), median([x[2] for x in freshness])))
    base_rows = [s for s in sizes if s[1] == 0]
    delta_rows = [s for s in sizes if s[1] > 0]
    if base_rows and delta_rows:
        say("Sizes: %d bases, the last %d rows (%.1f MB); %d deltas, median %d rows "
            "(%.1f MB), %.0f%% of the last base's bytes." % (
                len(base_rows), base_rows[-1][2], base_rows[-1][3] / 1e6,
                len(delta_rows), median([d[2] for d in delta_rows]),
                median([d[3] for d in delta_rows]) / 1e6,
                100.0 * median([d[3] for d in delta_rows]) / max(1, base_rows[-1][3])))
    say("")
    say("Scoring and serving beside training (examples or lines per second; p50/p99 "
        "per call of 256 lines or 1024 keys):")
    say("")
    say("| what | 1 client | 4 clients | / training's examples/s |")
    say("| --- | --- | --- | --- |")
    say("| worker training (wide_deep, 1+1, `--train` of every file) | %.0f | | 1.00 |"
        % train_rate)
    say("| `ps_predict` (one process) | %.0f | | %.2f |" % (
        median(predict_rates), median(predict_rates) / max(1, train_rate)))
    for what in ("Predict lines", "Lookup rows"):
        one, four = load[(what, 1)], load[(what, 4)]
        say("| `ps_serve` %s | %.0f (p50 %.2f / p99 %.2f ms) | %.0f (p50 %.2f / p99 %.2f ms) | %s |" % (
            what, one["items_per_sec"], one["p50_ms"], one["p99_ms"],
            four["items_per_sec"], four["p50_ms"], four["p99_ms"],
            "%.2f" % (max(one["items_per_sec"], four["items_per_sec"]) / max(1, train_rate))
            if what == "Predict lines" else ""))
    say("")
    say("![AUC per file](%s)" % args.plot)
    text = "\n".join(lines) + "\n"
    open(args.section_out, "w").write(text)
    print(text)
    plot(args.plot, rows)


def plot(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = list(range(len(rows)))
    plt.figure(figsize=(7, 4))
    for index, label in ((1, "(a) frozen"), (2, "(b) base per 4 files"),
                         (3, "(c) newest at arrival"),
                         (4, "(d) served as it trained"), (6, "progressive")):
        plt.plot(x, [r[index] if r[index] is not None else float("nan") for r in rows],
                 marker="o", label=label)
    plt.xticks(x, [r[0].replace(".tsv", "") for r in rows], rotation=45)
    plt.ylabel("AUC of the next file")
    plt.legend()
    plt.tight_layout()
    plt.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
