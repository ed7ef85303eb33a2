#!/usr/bin/python3
"""deploy/monitoring/ against a small running job and Debian's Prometheus.

A shard, a worker that trains slowly while it evaluates and exports, and
ps_serve serving those exports (Predict calls through the Python client),
all on loopback with their metrics endpoints; a checkpoint and a refused
call. Prometheus (Debian's prometheus) scrapes them every second under the
job names the operator objects give (ps-shard, ps-worker, ps-serve) and
loads alerts.yaml. Then every query of dashboard.json must return data, and
every series an alert expression selects must exist: a panel or a rule that
names a metric or label no binary exports is a failure. The operator
objects select those job names, and prometheus_rule.py wraps alerts.yaml's
groups unchanged.
"""
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."),
                        "parameter_server")
MONITORING = os.path.join(RUNFILES, "deploy/monitoring")
WORK = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
JOBS = ("ps-shard", "ps-worker", "ps-serve")
processes = []


def fail(message):
    for process in processes:
        process.kill()
    for log in sorted(glob.glob(os.path.join(WORK, "*.log"))):
        with open(log, errors="replace") as f:
            tail = f.read()[-1500:]
        sys.stderr.write(f"--- {os.path.basename(log)}\n{tail}\n")
    sys.exit(f"FAIL: {message}")


def binary(path):
    return os.path.join(RUNFILES, path)


def start(name, argv):
    log = open(os.path.join(WORK, name + ".log"), "w")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                               cwd=WORK)
    processes.append(process)
    return process


def wait_for(what, find, seconds=120):
    """Calls find() until it returns something true, for up to `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        found = find()
        if found:
            return found
        time.sleep(0.2)
    fail(f"no {what} after {seconds} s")


def log_match(name, pattern):
    with open(os.path.join(WORK, name + ".log"), errors="replace") as f:
        match = re.search(pattern, f.read())
    return match.group(1) if match else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(prometheus, expr):
    url = (f"http://{prometheus}/api/v1/query?" +
           urllib.parse.urlencode({"query": expr}))
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    if answer.get("status") != "success":
        fail(f"query {expr}: {answer}")
    return answer["data"]["result"]


# The operator objects and the rule wrapper name what the rules select.
def check_operator_objects():
    with open(os.path.join(MONITORING, "service-monitor.yaml")) as f:
        service_monitor = yaml.safe_load(f)
    with open(os.path.join(MONITORING, "pod-monitor.yaml")) as f:
        pod_monitor = yaml.safe_load(f)
    if (service_monitor["kind"], pod_monitor["kind"]) != ("ServiceMonitor",
                                                         "PodMonitor"):
        fail("service-monitor.yaml or pod-monitor.yaml is of another kind")
    for monitor in (service_monitor, pod_monitor):
        if monitor["spec"].get("jobLabel") != "app":
            fail(f"{monitor['kind']} does not name jobs by the app label")
    services = set(service_monitor["spec"]["selector"]["matchExpressions"][0]
                   ["values"])
    pods = {pod_monitor["spec"]["selector"]["matchLabels"]["app"]}
    if services | pods != {"ps-shard", "ps-shard-replica", "ps-serve",
                           "ps-worker"}:
        fail(f"the monitors scrape {services | pods}")
    with open(os.path.join(MONITORING, "alerts.yaml")) as f:
        rules = yaml.safe_load(f)
    wrapped = yaml.safe_load(subprocess.run(
        [sys.executable, os.path.join(MONITORING, "prometheus_rule.py"),
         "--label=release=test"], check=True, capture_output=True,
        text=True).stdout)
    if (wrapped["kind"] != "PrometheusRule" or
            wrapped["spec"]["groups"] != rules["groups"] or
            wrapped["metadata"]["labels"].get("release") != "test"):
        fail("prometheus_rule.py does not wrap alerts.yaml's groups")
    return rules


def start_job():
    gen = binary("worker/datagen/clicklog_gen")
    for name, lines, seed in (("train", 200000, 1), ("test", 2000, 2)):
        subprocess.run([gen, f"--out={WORK}/{name}.tsv", f"--lines={lines}",
                        f"--sample_seed={seed}"], check=True,
                       stderr=subprocess.DEVNULL)
    start("shard", [binary("server/ps_server"), "--listen=127.0.0.1:0",
                    "--metrics_listen=127.0.0.1:0",
                    f"--data_dir={WORK}/shard"])
    shard = wait_for("shard address",
                     lambda: log_match("shard", r"listening on (\S+)"))
    shard_metrics = wait_for(
        "shard metrics", lambda: log_match("shard", r"metrics on (\S+)"))
    os.makedirs(f"{WORK}/exports")
    # Slow enough to be training for the whole test, evaluating and
    # exporting as it goes.
    start("worker", [binary("worker/ps_worker"), f"--servers={shard}",
                     f"--train={WORK}/train.tsv", f"--test={WORK}/test.tsv",
                     "--batch_size=500", "--hidden=16", "--embedding_dim=4",
                     "--slow_step_ms=400", "--progress_every_s=1",
                     "--eval_every=5000", "--export_every_s=2",
                     f"--export_dir={WORK}/exports",
                     "--metrics_listen=127.0.0.1:0"])
    worker_metrics = wait_for(
        "worker metrics", lambda: log_match("worker", r"metrics on ([\d.:]+)"))
    start("serve", [binary("server/ps_serve"), f"--model_dir={WORK}/exports",
                    "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                    "--poll_ms=200", "--scorers=1"])
    serve = wait_for("ps_serve address",
                     lambda: log_match("serve", r"ps_serve listening on (\S+)"))
    serve_metrics = wait_for(
        "ps_serve metrics",
        lambda: log_match("serve", r"metrics on http://([\d.:]+)/metrics"))
    return shard, serve, {"ps-shard": shard_metrics,
                          "ps-worker": worker_metrics,
                          "ps-serve": serve_metrics}


def start_prometheus(targets):
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [os.path.join(MONITORING, "alerts.yaml")],
        "scrape_configs": [{"job_name": job,
                            "static_configs": [{"targets": [target]}]}
                           for job, target in targets.items()],
    }
    with open(f"{WORK}/prometheus.yml", "w") as f:
        yaml.safe_dump(config, f)
    start("prometheus", ["prometheus", f"--config.file={WORK}/prometheus.yml",
                         f"--storage.tsdb.path={WORK}/tsdb",
                         f"--web.listen-address=127.0.0.1:{port}"])
    prometheus = f"127.0.0.1:{port}"

    def all_up():
        try:
            up = query(prometheus, "up == 1")
        except OSError:
            return False
        return {r["metric"]["job"] for r in up} == set(JOBS)
    wait_for("scrape of every job", all_up)
    return prometheus


def exercise(shard, serve):
    """What the panels show besides training: a served model answering
    Predict, a checkpoint, and a refused call."""
    wait_for("an export served", lambda: log_match("serve", r"(serving \S+)"))
    admin = binary("ops/ps_admin")
    subprocess.run([admin, f"--servers={shard}", f"--dir={WORK}/ckpt",
                    "checkpoint"], check=True, capture_output=True)
    subprocess.run([admin, f"--servers={shard}", "--table=no.such.table",
                    "--key=1", "row"], capture_output=True)
    for _ in range(3):
        subprocess.run(
            [sys.executable, binary("tests/serve_client.py"), serve,
             binary("proto"), f"{WORK}/test.tsv", "50"],
            check=True, capture_output=True)


def main():
    rules = check_operator_objects()
    shard, serve, targets = start_job()
    prometheus = start_prometheus(targets)
    exercise(shard, serve)
    # Ten more scrapes: every rate() has its two samples after the calls.
    time.sleep(10)
    if processes[1].poll() is not None:
        fail("the worker ended before the queries: raise its --slow_step_ms")

    with open(os.path.join(MONITORING, "dashboard.json")) as f:
        dashboard = json.load(f)
    queries = [(panel["title"], target["expr"])
               for panel in dashboard["panels"]
               for target in panel.get("targets", [])]
    if len(queries) < 20:
        fail(f"only {len(queries)} dashboard queries")
    empty = [f"{title}: {expr}" for title, expr in queries
             if not query(prometheus, expr)]
    # An alert's expression is quiet on a healthy job; what it selects must
    # still exist. Each metric name with its matchers, as written.
    selectors = []
    for rule in rules["groups"][0]["rules"]:
        for name, matchers in re.findall(
                r"\b((?:ps|grpc_server|process)_[a-z_]+|up)\b(\{[^}]*\})?",
                rule["expr"]):
            selectors.append((rule["alert"], name + matchers))
    missing = [f"{alert}: {selector}" for alert, selector in selectors
               if not query(prometheus, selector)]
    if empty or missing:
        fail("panels with no data:\n  " + "\n  ".join(empty) +
             "\nalert series that do not exist:\n  " + "\n  ".join(missing))
    with urllib.request.urlopen(f"http://{prometheus}/api/v1/rules",
                                timeout=10) as response:
        groups = json.load(response)["data"]["groups"]
    health = {r["name"]: r["health"] for g in groups for r in g["rules"]}
    if len(health) != len(rules["groups"][0]["rules"]) or any(
            h != "ok" for h in health.values()):
        fail(f"Prometheus's rules: {health}")
    for process in processes:
        process.kill()
    print(f"{len(queries)} dashboard queries and {len(selectors)} alert "
          f"selectors return data; {len(health)} rules evaluate")


if __name__ == "__main__":
    main()
