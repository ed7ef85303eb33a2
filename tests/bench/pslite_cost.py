#!/usr/bin/env python3
"""ps-lite's server CPU per pulled and per pushed row, for
tests/bench/shard_cost.sh: runs the peer's own bench
($PEERS_DIR/pslite-bench/run.sh: 1 server, N worker processes, a load
phase, then pull for --seconds, then push for --seconds) and samples the
server process's CPU time (/proc/PID/stat) every few milliseconds, cutting
the phases where the workers' log gains its N "pslite pull" lines and then
its N "pslite push" lines.

Push: the server's CPU between those two marks over the rows pushed. Pull:
the load phase comes before it and has no mark of its end, so the bench
runs twice, for --seconds and for a short --base_seconds, and the pull cost
is the difference of the CPU at the pull mark over the difference of the
rows pulled (the load, the same in both, cancels).

    pslite_cost.py --peers ../shared/peers --dim 16 --workers 1 4
prints one line per op and worker count:
    ps-lite pull dim=16 clients=1: 123 ns/row (9.1 M rows, 1.12 s CPU)
"""
import argparse
import glob
import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def server_pid():
    """The ps-lite bench process running as the server, or None."""
    for stat in glob.glob("/proc/[0-9]*/comm"):
        pid = stat.split("/")[2]
        try:
            with open(stat) as f:
                if f.read().strip() != "pslite_bench":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if b"DMLC_ROLE=server" in f.read().split(b"\0"):
                    return pid
        except OSError:
            continue
    return None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def run_once(run_sh, dim, rows, seconds, workers):
    """One run of the peer's bench for these worker counts: per count, the
    server's CPU at the pull and push marks and the rows each op did."""
    env = dict(os.environ, BENCH_DIM=str(dim), BENCH_ROWS=str(rows),
               BENCH_SECONDS=str(seconds))
    started = time.time()
    bench = subprocess.Popen(["bash", run_sh] + [str(n) for n in workers], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marks = {}
    pid, last_cpu = None, 0.0
    while bench.poll() is None:
        time.sleep(0.005)
        if pid is None or not os.path.exists(f"/proc/{pid}"):
            pid = server_pid()
            if pid is None:
                continue
        try:
            last_cpu = cpu_seconds(pid)
        except OSError:
            pid = None
            continue
        for n in workers:
            logs = [p for p in glob.glob(f"/tmp/pslite-build.*/workers-{n}.log")
                    if os.path.getmtime(p) >= started]
            if not logs:
                continue
            with open(logs[0]) as f:
                text = f.read()
            for op in ("pull", "push"):
                if (n, op) not in marks and text.count(f"pslite {op} ") >= n:
                    marks[(n, op)] = last_cpu
    output = bench.stdout.read()
    if bench.returncode != 0:
        sys.exit(f"pslite_cost: {run_sh} exited {bench.returncode}:\n{output[-2000:]}")
    result = {}
    for n in workers:
        rates = {}
        for line in output.splitlines():
            # "ps-lite pull, 4 worker(s): 5.33 M rows/s"
            words = line.split()
            if len(words) >= 5 and words[0] == "ps-lite" and words[2] == str(n):
                rates[words[1].rstrip(",")] = float(words[4]) * 1e6
        if (n, "pull") not in marks or (n, "push") not in marks or len(rates) != 2:
            sys.exit(f"pslite_cost: no marks or rates for {n} workers: {marks} {output[-800:]}")
        result[n] = {"pull_cpu": marks[(n, "pull")], "push_cpu": marks[(n, "push")],
                     "pull_rows": rates["pull"] * seconds, "push_rows": rates["push"] * seconds}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", required=True, help="the peers' directory")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--rows", type=int, default=500000)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--base_seconds", type=float, default=0.5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    run_sh = os.path.join(args.peers, "pslite-bench", "run.sh")
    long_run = run_once(run_sh, args.dim, args.rows, args.seconds, args.workers)
    short_run = run_once(run_sh, args.dim, args.rows, args.base_seconds, args.workers)
    for n in args.workers:
        full, base = long_run[n], short_run[n]
        pull_rows = full["pull_rows"] - base["pull_rows"]
        pull_cpu = full["pull_cpu"] - base["pull_cpu"]
        push_rows = full["push_rows"]
        push_cpu = full["push_cpu"] - full["pull_cpu"]
        for op, cpu, rows in (("pull", pull_cpu, pull_rows), ("push", push_cpu, push_rows)):
            print(f"ps-lite {op} dim={args.dim} clients={n}: {cpu / rows * 1e9:.0f} ns/row "
                  f"({rows / 1e6:.1f} M rows, {cpu:.2f} s CPU)")


if __name__ == "__main__":
    main()
