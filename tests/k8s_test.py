#!/usr/bin/python3
"""Checks deploy/k8s/ and the deploy/ scripts against the binaries.

Every manifest parses (python3-yaml); every flag a manifest or a deploy/
script passes to ps_server, ps_worker, ps_admin, ps_predict or clicklog_gen
is one that binary's --helpfull lists; and the names and ports agree: the
headless Service and the StatefulSet, the probes and the container ports,
the shard count, the replicas and the workers' --servers, the Job's
completions and --num_workers, the shards' memory and --cache_mb.
"""
import glob
import os
import re
import subprocess
import sys

import yaml

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."), "parameter_server")
BINARIES = {
    "ps_server": "server/ps_server",
    "ps_admin": "server/ps_admin",
    "ps_worker": "worker/ps_worker",
    "ps_predict": "worker/ps_predict",
    "clicklog_gen": "worker/clicklog_gen",
}
failures = []


def fail(message):
    failures.append(message)
    print("FAIL:", message, file=sys.stderr)


def known_flags(binary):
    text = subprocess.run([os.path.join(RUNFILES, BINARIES[binary]), "--helpfull"],
                          capture_output=True, text=True).stdout
    flags = set(re.findall(r"^\s+--([a-z0-9_]+) \(", text, re.M))
    if len(flags) < 5:
        fail(f"{binary} --helpfull lists {len(flags)} flags")
    return flags


FLAGS = {binary: known_flags(binary) for binary in BINARIES}


def invocations(text):
    """(binary, [flag names]) for each command line in shell text that runs
    one of the binaries."""
    text = re.sub(r"\\\n", " ", text)
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in re.finditer(r"(?:^|[\s/\"'])(%s)(?=[\s\"'])" % "|".join(BINARIES), line):
            rest = re.split(r"[|;&>]|\$\(|\)", line[match.end():])[0]
            flags = re.findall(r"(?:^|\s)--([a-z0-9_]+)", rest)
            found.append((match.group(1), flags))
    return found


def check_flags(where, text):
    checked = 0
    for binary, flags in invocations(text):
        for flag in flags:
            name = flag[2:] if flag.startswith("no") and flag[2:] in FLAGS[binary] else flag
            if name not in FLAGS[binary]:
                fail(f"{where}: {binary} has no --{flag}")
            checked += 1
    return checked


def flag_values(command):
    return dict(re.findall(r"--([a-z0-9_]+)=(\S+)", command))


def command_of(container):
    return " ".join(container.get("command", []) + container.get("args", []))


def mebibytes(quantity):
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()
    return int(number) * (1024 if unit == "Gi" else 1)


manifests = sorted(glob.glob(os.path.join(RUNFILES, "deploy/k8s/*.yaml")))
if len(manifests) < 4:
    fail(f"only {len(manifests)} manifests in deploy/k8s")
objects = []
for path in manifests:
    with open(path) as f:
        objects += [o for o in yaml.safe_load_all(f) if o]
by_kind = {}
for o in objects:
    for key in ("apiVersion", "kind", "metadata"):
        if key not in o:
            fail(f"an object without {key}: {o}")
    by_kind.setdefault(o["kind"], []).append(o)

checked = 0
containers = []
for o in objects:
    spec = o.get("spec", {})
    template = (spec.get("jobTemplate", {}).get("spec", {}).get("template")
                or spec.get("template"))
    if template:
        for container in template["spec"]["containers"]:
            containers.append((o, container))
            checked += check_flags(f"{o['kind']}/{o['metadata']['name']}", command_of(container))
for script in sorted(glob.glob(os.path.join(RUNFILES, "deploy/*.sh"))):
    with open(script) as f:
        checked += check_flags(os.path.basename(script), f.read())
if checked < 40:
    fail(f"only {checked} flags found to check")

config = by_kind["ConfigMap"][0]["data"]
service = next(s for s in by_kind["Service"] if s["spec"].get("clusterIP") == "None")
shards = by_kind["StatefulSet"][0]
if shards["spec"]["serviceName"] != service["metadata"]["name"]:
    fail("the StatefulSet's serviceName is not the headless Service")
if service["spec"]["selector"] != shards["spec"]["selector"]["matchLabels"]:
    fail("the Service does not select the StatefulSet's pods")
replicas = shards["spec"]["replicas"]
if int(config["NUM_SHARDS"]) != replicas:
    fail(f"NUM_SHARDS {config['NUM_SHARDS']} but {replicas} replicas")
server = shards["spec"]["template"]["spec"]["containers"][0]
server_flags = flag_values(command_of(server))
ports = {p["name"]: p["containerPort"] for p in server["ports"]}
for port in service["spec"]["ports"]:
    if ports.get(port["targetPort"]) != port["port"]:
        fail(f"Service port {port['name']} {port['port']} is not the container's")
for flag, name in (("listen", "grpc"), ("health_listen", "health"), ("metrics_listen", "metrics")):
    if server_flags.get(flag, "").rsplit(":", 1)[-1] != str(ports.get(name)):
        fail(f"ps_server --{flag} is not container port {name}")
for probe in ("readinessProbe", "livenessProbe"):
    if server.get(probe, {}).get("grpc", {}).get("port") != ports["health"]:
        fail(f"the shards' {probe} is not a gRPC probe on the health port")
annotations = shards["spec"]["template"]["metadata"]["annotations"]
if annotations.get("prometheus.io/port") != str(ports["metrics"]):
    fail("the shards' scrape annotation is not the metrics port")
if "${HOSTNAME##*-}" not in server_flags.get("shard_index", ""):
    fail("--shard_index does not come from the pod ordinal")
expected_servers = ",".join(
    f"{shards['metadata']['name']}-{i}.{service['metadata']['name']}:{ports['grpc']}"
    for i in range(replicas))
if config["SERVERS"] != expected_servers:
    fail(f"SERVERS is {config['SERVERS']}, the StatefulSet gives {expected_servers}")
request = mebibytes(server["resources"]["requests"]["memory"])
limit = mebibytes(server["resources"]["limits"]["memory"])
if not int(config["CACHE_MB"]) + 512 <= request <= limit:
    fail(f"shard memory request {request} Mi and limit {limit} Mi do not fit --cache_mb={config['CACHE_MB']} and RocksDB")

job = by_kind["Job"][0]
if job["spec"].get("completionMode") != "Indexed":
    fail("the workers are not an Indexed Job")
if int(config["NUM_WORKERS"]) != job["spec"]["completions"]:
    fail("NUM_WORKERS is not the Job's completions")
for o, container in containers:
    command = command_of(container)
    values = flag_values(command)
    if "--servers=" in command and values["servers"] != "${SERVERS}":
        fail(f"{o['metadata']['name']} names the servers itself")
    if "ps_worker" in command and values.get("worker_index") != "${JOB_COMPLETION_INDEX}":
        fail("--worker_index does not come from JOB_COMPLETION_INDEX")
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"].startswith("/etc/ps") and not mount.get("readOnly"):
            fail(f"{o['metadata']['name']} mounts {mount['mountPath']} writable")
if not by_kind.get("PodDisruptionBudget"):
    fail("no PodDisruptionBudget for the shards")
if not by_kind.get("CronJob"):
    fail("no checkpoint CronJob")

if failures:
    sys.exit(1)
print(f"{len(objects)} objects in {len(manifests)} manifests; {checked} flags checked")
