#!/usr/bin/python3
"""Checks deploy/k8s/ and the deploy/ scripts against the binaries.

Every manifest parses (python3-yaml); every flag a manifest or a deploy/
script passes to ps_server, ps_serve, ps_worker, ps_admin, ps_predict or
clicklog_gen
is one that binary's --helpfull lists; and the names and ports agree: the
headless Service and the StatefulSet, the probes and the container ports,
the shard count (the replicas, copied by kustomization.yaml) and the names
the clients build from it for --servers, the Job's
completions and --num_workers, the shards' memory and --cache_mb.
"""
import copy
import glob
import os
import re
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from k8s_manifests import (  # noqa: E402
    RUNFILES, check_flags, command_of, commit_tag, cores, fail,
    failures, flag_values, image_tag, invocations, mebibytes, memory_bytes,
    mount_of, secrets_of, shard_flags, volume_kinds)

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
templates = []
for o in objects:
    spec = o.get("spec", {})
    template = (spec.get("jobTemplate", {}).get("spec", {}).get("template")
                or spec.get("template"))
    if template:
        templates.append((o, template))
        for container in (template["spec"].get("initContainers", [])
                          + template["spec"]["containers"]):
            containers.append((o, container))
            checked += check_flags(f"{o['kind']}/{o['metadata']['name']}", command_of(container))
if len(templates) < 3:
    fail(f"only {len(templates)} pod templates (shards, workers, checkpoints)")

# The etcd component (etcd/): a Component listing its files, three members
# that name each other, ETCD pointed at their client URLs, and its pods
# under the same Pod Security Standard as the job's (below).
component_dir = os.path.join(RUNFILES, "deploy/k8s/etcd")
component_objects = {}
for path in sorted(glob.glob(os.path.join(component_dir, "*.yaml"))):
    with open(path) as f:
        component_objects[os.path.basename(path)] = [o for o in yaml.safe_load_all(f) if o]
component = component_objects.get("kustomization.yaml", [{}])[0]
if component.get("kind") != "Component":
    fail("deploy/k8s/etcd/kustomization.yaml is not a kustomize Component")
listed = set(component.get("resources", [])) | {
    patch.get("path") for patch in component.get("patches", [])}
if listed != set(component_objects) - {"kustomization.yaml"}:
    fail(f"the etcd component lists {sorted(listed)}, holds {sorted(component_objects)}")
etcd_objects = [o for objects_of in component_objects.values() for o in objects_of]
etcd_sets = [o for o in etcd_objects if o.get("kind") == "StatefulSet"]
etcd_services = [o for o in etcd_objects if o.get("kind") == "Service"]
etcd_patches = [o for o in etcd_objects if o.get("kind") == "ConfigMap"]
if len(etcd_sets) != 1 or len(etcd_services) != 1 or len(etcd_patches) != 1:
    fail("the etcd component is not one StatefulSet, one Service and one ConfigMap patch")
else:
    members = etcd_sets[0]
    etcd_service = etcd_services[0]["metadata"]["name"]
    member_names = [f"{members['metadata']['name']}-{i}"
                    for i in range(members["spec"]["replicas"])]
    etcd_ports = {p["name"]: p["port"] for p in etcd_services[0]["spec"]["ports"]}
    etcd_command = command_of(members["spec"]["template"]["spec"]["containers"][0])
    if len(member_names) != 3:
        fail(f"etcd has {len(member_names)} members, not 3")
    cluster = ",".join(f"{name}=https://{name}.{etcd_service}:{etcd_ports['peer']}"
                       for name in member_names)
    if f"--initial-cluster={cluster}" not in etcd_command:
        fail(f"the etcd members do not name each other as {cluster}")
    clients = ",".join(f"{name}.{etcd_service}:{etcd_ports['client']}" for name in member_names)
    if etcd_patches[0].get("data", {}).get("ETCD") != clients:
        fail(f"the etcd component sets ETCD to {etcd_patches[0].get('data')}, not {clients}")
    if etcd_patches[0]["metadata"]["name"] != by_kind["ConfigMap"][0]["metadata"]["name"]:
        fail("the etcd component patches another ConfigMap than the job's")
    image = members["spec"]["template"]["spec"]["containers"][0]["image"]
    if image_tag(image) in (None, "latest"):
        fail(f"the etcd image {image!r} is not pinned")
    # TLS both ways, for clients and members: a client without a
    # certificate the CA signed is refused.
    for flag in ("--listen-client-urls=https://", "--advertise-client-urls=https://",
                 "--client-cert-auth", "--trusted-ca-file=", "--cert-file=",
                 "--key-file=", "--peer-client-cert-auth", "--peer-trusted-ca-file="):
        if flag not in etcd_command:
            fail(f"the etcd members lack {flag}")
    etcd_tls = etcd_patches[0].get("data", {}).get("ETCD_TLS", "")
    if not etcd_tls:
        fail("the etcd component does not set ETCD_TLS")
    # Every pod that reaches etcd mounts the client certificate there and
    # passes it (the shards, their replicas, the workers, the checkpoints).
    etcd_tls_flags = (f"--etcd_tls_ca=${{ETCD_TLS}}/ca.crt "
                      f"--etcd_tls_cert=${{ETCD_TLS}}/tls.crt "
                      f"--etcd_tls_key=${{ETCD_TLS}}/tls.key")
    replica_objects = []
    for path in sorted(glob.glob(os.path.join(RUNFILES, "deploy/k8s/replicas/*.yaml"))):
        with open(path) as f:
            replica_objects += [o for o in yaml.safe_load_all(f) if o]
    etcd_users = 0
    for o in objects + replica_objects:
        spec = o.get("spec", {})
        template = (spec.get("jobTemplate", {}).get("spec", {}).get("template")
                    or spec.get("template"))
        if not template:
            continue
        for container in template["spec"]["containers"]:
            command = command_of(container)
            if "--etcd=${ETCD}" not in command:
                continue
            etcd_users += 1
            name = o["metadata"]["name"]
            if etcd_tls_flags not in command:
                fail(f"{name} reaches etcd without its client certificate flags")
            mounted = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
            secrets = {v["name"]: v.get("secret", {}) for v in template["spec"].get("volumes", [])}
            at = [n for n, s in secrets.items() if s.get("secretName") == "ps-etcd-client-tls"]
            if not at or mounted.get(at[0]) != etcd_tls:
                fail(f"{name} does not mount ps-etcd-client-tls at {etcd_tls}")
            elif not secrets[at[0]].get("optional"):
                fail(f"{name}'s ps-etcd-client-tls is not optional (the job runs without etcd)")
    if etcd_users < 4:
        fail(f"only {etcd_users} pods reach etcd (shards, replicas, workers, checkpoints)")
    # Only the job's pods reach etcd's clients' port.
    policies = [o for o in etcd_objects if o.get("kind") == "NetworkPolicy"]
    if len(policies) != 1:
        fail("the etcd component has no NetworkPolicy")
    else:
        policy = policies[0]["spec"]
        if policy["podSelector"].get("matchLabels", {}).get("app") != "ps-etcd":
            fail("the etcd NetworkPolicy selects other pods than the members")
        client_rules = [r for r in policy.get("ingress", [])
                        if any(p.get("port") == 2379 for p in r.get("ports", []))]
        if len(client_rules) != 1 or not client_rules[0].get("from"):
            fail("etcd's clients' port is open to any pod")
    templates.append((members, members["spec"]["template"]))
# Only the job's pods reach the shards' data port.
shard_policies = [o for o in by_kind.get("NetworkPolicy", [])
                  if o["metadata"]["name"] == "ps-shard"]
if len(shard_policies) != 1:
    fail("no NetworkPolicy ps-shard")
else:
    policy = shard_policies[0]["spec"]
    selected = set()
    for expression in policy["podSelector"].get("matchExpressions", []):
        selected |= set(expression.get("values", []))
    if selected != {"ps-shard", "ps-shard-replica"}:
        fail(f"the shards' NetworkPolicy selects {sorted(selected)}")
    data_rules = [r for r in policy.get("ingress", [])
                  if any(p.get("port") == 50051 for p in r.get("ports", []))]
    allowed = set()
    for rule in data_rules:
        for peer in rule.get("from", []):
            for expression in peer.get("podSelector", {}).get("matchExpressions", []):
                allowed |= set(expression.get("values", []))
    if len(data_rules) != 1 or not data_rules[0].get("from"):
        fail("the shards' data port is open to any pod")
    # Every pod that runs a client of the shards is let in.
    for o, template in templates:
        app = template.get("metadata", {}).get("labels", {}).get("app")
        runs = " ".join(command_of(c) for c in template["spec"]["containers"])
        if re.search(r"\b(ps_worker|ps_admin)\b", runs) and app not in allowed:
            fail(f"{o['metadata']['name']}'s pods (app={app}) may not reach the shards")

# The flags a SHARDS assignment gives to the binary the line then runs.
for o, container in containers:
    command = command_of(container)
    for binary, _ in invocations(command):
        for assigned in shard_flags(command):
            checked += check_flags(f"{o['metadata']['name']} SHARDS",
                                   f"{binary} {assigned}")
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
if config["NUM_SHARDS"].isdigit():
    fail(f"config.yaml writes a shard count ({config['NUM_SHARDS']}): the replicas are the one")
# The shard count is written once: kustomization.yaml copies the
# StatefulSet's replicas into NUM_SHARDS.
copies_replicas = [
    r for r in by_kind.get("Kustomization", [{}])[0].get("replacements", [])
    if r.get("source") == {"kind": "StatefulSet", "name": shards["metadata"]["name"],
                           "fieldPath": "spec.replicas"}
    and {"select": {"kind": "ConfigMap", "name": by_kind["ConfigMap"][0]["metadata"]["name"]},
         "fieldPaths": ["data.NUM_SHARDS"]} in r.get("targets", [])]
if len(copies_replicas) != 1:
    fail("kustomization.yaml does not copy the StatefulSet's replicas into NUM_SHARDS")
if "SERVERS" in config:
    fail("config.yaml writes the shards' addresses: the clients name them from NUM_SHARDS")
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
# Embedded by default; with ETCD set, the shards register there under JOB
# at their stable names.
if config.get("ETCD") != "":
    fail(f"config.yaml sets ETCD={config.get('ETCD')!r}: the default is embedded")
if not re.fullmatch(r"[a-z0-9_-]{1,64}", config.get("JOB", "")):
    fail(f"JOB {config.get('JOB')!r} is not a job name")
etcd_flags = (f"${{ETCD:+ --etcd=${{ETCD}} --job=${{JOB}} --advertise_address="
              f"${{HOSTNAME}}.{service['metadata']['name']}:{ports['grpc']}}}")
if etcd_flags not in command_of(server):
    fail(f"the shards do not register in etcd as {etcd_flags}")


def servers_of(container, num_shards, etcd="", etcd_tls=""):
    """What the SHARDS assignments of a client's sh -c script set, run by sh
    the way the pod runs them (Kubernetes turns $$ into $) with this
    NUM_SHARDS and ETCD; "exit N" if the script exits first."""
    if container.get("command") != ["/bin/sh", "-c"]:
        return "not a /bin/sh -c script"
    script = " ".join(container.get("args", []))
    script = script.replace("$$", "$").split("exec ", 1)[0] + 'printf %s "$SHARDS"'
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          env={"NUM_SHARDS": str(num_shards), "ETCD": etcd,
                               "ETCD_TLS": etcd_tls, "JOB": config["JOB"]})
    return done.stdout if done.returncode == 0 else f"exit {done.returncode}"


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
    # The names the pods of the StatefulSet have, for every count it scales to.
    if "SHARDS=" in command:
        for count in (1, replicas, replicas + 1):
            expected = "--servers=" + ",".join(
                f"{shards['metadata']['name']}-{i}.{service['metadata']['name']}:{ports['grpc']}"
                for i in range(count))
            got = servers_of(container, count)
            if got != expected:
                fail(f"{o['metadata']['name']} with NUM_SHARDS={count} passes {got!r}, "
                     f"the StatefulSet's shards are {expected!r}")
        if servers_of(container, replicas, etcd="e:2379") != f"--etcd=e:2379 --job={config['JOB']}":
            fail(f"{o['metadata']['name']} does not take --etcd from ETCD")
        if servers_of(container, replicas, etcd="e:2379", etcd_tls="/t") != (
                f"--etcd=e:2379 --job={config['JOB']} --etcd_tls_ca=/t/ca.crt "
                "--etcd_tls_cert=/t/tls.crt --etcd_tls_key=/t/tls.key"):
            fail(f"{o['metadata']['name']} does not take etcd's client certificate from ETCD_TLS")
        # Applied without kustomize, NUM_SHARDS is not a count: it exits.
        if servers_of(container, config["NUM_SHARDS"]) != "exit 64":
            fail(f"{o['metadata']['name']} runs with NUM_SHARDS={config['NUM_SHARDS']}")
    # A client of the shards reaches them at SERVERS, or through etcd when
    # ETCD is set, never both.
    if re.search(r"\b(ps_worker|ps_admin)\b", command):
        if sorted(shard_flags(command)) != sorted(
                ["--servers=${SERVERS}",
                 "--etcd=${ETCD} --job=${JOB}${ETCD_TLS:+ --etcd_tls_ca=${ETCD_TLS}/ca.crt "
                 "--etcd_tls_cert=${ETCD_TLS}/tls.crt --etcd_tls_key=${ETCD_TLS}/tls.key}"]) or \
                '[ -z "${ETCD}" ] || SHARDS=' not in command or "${SHARDS}" not in command:
            fail(f"{o['metadata']['name']} does not take --servers or --etcd from ETCD")
    if "ps_worker" in command and values.get("worker_index") != "${JOB_COMPLETION_INDEX}":
        fail("--worker_index does not come from JOB_COMPLETION_INDEX")
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"].startswith("/etc/ps") and not mount.get("readOnly"):
            fail(f"{o['metadata']['name']} mounts {mount['mountPath']} writable")
if not by_kind.get("PodDisruptionBudget"):
    fail("no PodDisruptionBudget for the shards")
if not by_kind.get("CronJob"):
    fail("no checkpoint CronJob")


# The replicas component (replicas/): a Component listing its files; a
# StatefulSet whose pod template is the shards' but for its names, the
# address it registers under and an anti-affinity that keeps the two
# processes of a shard on different nodes; its count copied from the
# shards'; REPLICAS set, and both sets run --replicas=${REPLICAS}; the
# PodDisruptionBudget counts both.
replicas_dir = os.path.join(RUNFILES, "deploy/k8s/replicas")
replica_files = {}
for path in sorted(glob.glob(os.path.join(replicas_dir, "*.yaml"))):
    with open(path) as f:
        replica_files[os.path.basename(path)] = [o for o in yaml.safe_load_all(f) if o]
replica_component = replica_files.get("kustomization.yaml", [{}])[0]
if replica_component.get("kind") != "Component":
    fail("deploy/k8s/replicas/kustomization.yaml is not a kustomize Component")
listed = set(replica_component.get("resources", [])) | {
    patch.get("path") for patch in replica_component.get("patches", [])}
if listed != set(replica_files) - {"kustomization.yaml"}:
    fail(f"the replicas component lists {sorted(listed)}, holds {sorted(replica_files)}")
replica_objects = [o for objects_of in replica_files.values() for o in objects_of]
replica_sets = [o for o in replica_objects if o.get("kind") == "StatefulSet"]
replica_services = [o for o in replica_objects if o.get("kind") == "Service"]
replica_patches = [o for o in replica_objects if o.get("kind") == "ConfigMap"]
if len(replica_sets) != 1 or len(replica_services) != 1 or len(replica_patches) != 1:
    fail("the replicas component is not one StatefulSet, one Service and one ConfigMap patch")
else:
    replica_set, replica_service = replica_sets[0], replica_services[0]
    set_name = replica_set["metadata"]["name"]
    if replica_set["spec"]["serviceName"] != replica_service["metadata"]["name"]:
        fail("the replicas' serviceName is not their headless Service")
    if replica_service["spec"].get("clusterIP") != "None":
        fail("the replicas' Service is not headless")
    if replica_service["spec"]["selector"] != replica_set["spec"]["selector"]["matchLabels"]:
        fail("the replicas' Service does not select their pods")
    if replica_service["spec"]["ports"] != service["spec"]["ports"]:
        fail("the replicas' Service ports are not the shards'")
    if shards["spec"]["selector"]["matchLabels"].items() <= \
            replica_set["spec"]["template"]["metadata"]["labels"].items():
        fail("the shards' StatefulSet would select the replicas' pods")
    if replica_set["spec"]["selector"]["matchLabels"].items() <= \
            shards["spec"]["template"]["metadata"]["labels"].items():
        fail("the replicas' StatefulSet would select the shards' pods")
    # The template, but for what a replica's must differ in.
    expected = copy.deepcopy(shards["spec"]["template"])
    expected["metadata"]["labels"].update(replica_set["spec"]["selector"]["matchLabels"])
    container = expected["spec"]["containers"][0]
    container["args"] = [a.replace(
        f".{service['metadata']['name']}:", f".{replica_service['metadata']['name']}:")
        for a in container["args"]]
    got = copy.deepcopy(replica_set["spec"]["template"])
    affinity = got["spec"].pop("affinity", {})
    if got != expected:
        fail(f"{set_name}'s pod template is not the shards' (but for its names)")
    terms = affinity.get("podAntiAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", [])
    both = [shards["spec"]["template"]["metadata"]["labels"],
            replica_set["spec"]["template"]["metadata"]["labels"]]
    if not any(t.get("topologyKey") == "kubernetes.io/hostname"
               and "apps.kubernetes.io/pod-index" in t.get("matchLabelKeys", [])
               and all(t["labelSelector"]["matchLabels"].items() <= labels.items()
                       for labels in both)
               for t in terms):
        fail(f"{set_name} may share a node with the other process of its shard")
    copies_count = [
        r for r in replica_component.get("replacements", [])
        if r.get("source") == {"kind": "StatefulSet", "name": shards["metadata"]["name"],
                               "fieldPath": "spec.replicas"}
        and {"select": {"kind": "StatefulSet", "name": set_name},
             "fieldPaths": ["spec.replicas"]} in r.get("targets", [])]
    if len(copies_count) != 1:
        fail("the replicas component does not copy the shards' count")
    patched = replica_patches[0].get("data", {})
    if not patched.get("REPLICAS", "").isdigit() or int(patched["REPLICAS"]) < 1:
        fail(f"the replicas component sets REPLICAS={patched.get('REPLICAS')!r}")
    if patched.get("REPLICATION") not in ("sync", "async"):
        fail(f"the replicas component sets REPLICATION={patched.get('REPLICATION')!r}")
    for name in ("REPLICAS", "REPLICATION"):
        if name not in config:
            fail(f"config.yaml has no {name} for the shards' command")
    if "--replicas=${REPLICAS}" not in command_of(server):
        fail("the shards do not run --replicas=${REPLICAS}")
    budget = next((b for b in by_kind.get("PodDisruptionBudget", [])
                   if b["metadata"]["name"] == "ps-shard"), {})
    budget_labels = budget.get("spec", {}).get("selector", {}).get("matchLabels", {})
    if not budget_labels or not all(budget_labels.items() <= labels.items() for labels in both):
        fail("the PodDisruptionBudget does not count the shards and their replicas together")
    templates.append((replica_set, replica_set["spec"]["template"]))


# The "restricted" Pod Security Standard, for every pod template
# (kubernetes.io/docs/concepts/security/pod-security-standards/).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
# Flags whose value is a path the process writes.
WRITTEN_PATHS = ("data_dir", "dir", "checkpoint_dir", "metrics_out",
                 "interval_metrics_out", "out")


for o, template in templates:
    where = f"{o['kind']}/{o['metadata']['name']}"
    pod = template["spec"]
    context = pod.get("securityContext", {})
    if context.get("runAsNonRoot") is not True:
        fail(f"{where}: the pod does not set runAsNonRoot: true")
    uid = context.get("runAsUser")
    if type(uid) is not int or uid <= 0:
        fail(f"{where}: the pod's runAsUser is {uid!r}, not a numeric non-root uid")
    if context.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail(f"{where}: the pod's seccompProfile is not RuntimeDefault")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            fail(f"{where}: {key}")
    kinds = volume_kinds(o, pod)
    for name, kind in kinds.items():
        if kind not in RESTRICTED_VOLUMES:
            fail(f"{where}: volume {name} is {kind}, which the restricted standard refuses")
    for container in pod.get("initContainers", []) + pod["containers"]:
        cwhere = f"{where} container {container['name']}"
        security = container.get("securityContext", {})
        if security.get("allowPrivilegeEscalation") is not False:
            fail(f"{cwhere}: allowPrivilegeEscalation is not false")
        capabilities = security.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            fail(f"{cwhere}: does not drop ALL capabilities")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            fail(f"{cwhere}: adds capabilities {capabilities['add']}")
        if security.get("readOnlyRootFilesystem") is not True:
            fail(f"{cwhere}: readOnlyRootFilesystem is not true")
        if security.get("privileged") or security.get("runAsNonRoot") is False \
                or security.get("runAsUser") == 0:
            fail(f"{cwhere}: runs privileged or as root")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            fail(f"{cwhere}: uses a hostPort")
        tmp = mount_of(container, "/tmp")
        if (tmp is None or tmp["mountPath"].rstrip("/") != "/tmp" or tmp.get("readOnly")
                or kinds.get(tmp["name"]) != "emptyDir"):
            fail(f"{cwhere}: no writable emptyDir at /tmp")
        for flag, value in flag_values(command_of(container)).items():
            if flag not in WRITTEN_PATHS or not value.startswith("/"):
                continue
            mount = mount_of(container, value)
            if (mount is None or mount.get("readOnly")
                    or kinds.get(mount["name"]) not in ("emptyDir", "persistentVolumeClaim")):
                fail(f"{cwhere}: --{flag}={value} is on no writable volume")

# TLS: the shards' key stays with the shards; clients bring their own.
shard_pod = shards["spec"]["template"]["spec"]
shard_secrets = secrets_of(shard_pod)
shard_key = server_flags.get("tls_key", "")
shard_key_mount = mount_of(server, shard_key) if shard_key else None
server_secret = shard_secrets.get(shard_key_mount["name"]) if shard_key_mount else None
if not server_secret:
    fail(f"ps_server's --tls_key={shard_key!r} is in no Secret the shards mount")
client_secrets = set()
for o, template in templates:
    # The shards' replicas are shards: the same key serves them.
    if o is shards or o in replica_sets:
        continue
    where = f"{o['kind']}/{o['metadata']['name']}"
    pod = template["spec"]
    secrets = secrets_of(pod)
    if server_secret in secrets.values():
        fail(f"{where} mounts the shards' Secret {server_secret}")
    for container in pod.get("initContainers", []) + pod["containers"]:
        command = command_of(container)
        if not re.search(r"\b(ps_worker|ps_admin)\b", command):
            continue
        values = flag_values(command)
        for flag in ("tls_ca", "tls_cert", "tls_key"):
            mount = mount_of(container, values.get(flag, "-"))
            secret = secrets.get(mount["name"]) if mount else None
            if not secret:
                fail(f"{where}: --{flag} is not in a Secret the pod mounts")
            elif flag == "tls_key":
                client_secrets.add(secret)
if not client_secrets:
    fail("no client passes --tls_key from a Secret of its own")
for secret in client_secrets & set(shard_secrets.values()):
    fail(f"the shards mount the clients' Secret {secret}")

# The shards spread over nodes: a node lost takes one shard.
shard_labels = shards["spec"]["template"]["metadata"]["labels"]


def selects_shards(selector):
    labels = (selector or {}).get("matchLabels", {})
    return bool(labels) and labels.items() <= shard_labels.items()


spread = any(
    c.get("topologyKey") == "kubernetes.io/hostname" and c.get("maxSkew") == 1
    and c.get("whenUnsatisfiable") == "DoNotSchedule" and selects_shards(c.get("labelSelector"))
    for c in shard_pod.get("topologySpreadConstraints", []))
anti_affinity = any(
    term.get("topologyKey") == "kubernetes.io/hostname" and selects_shards(term.get("labelSelector"))
    for term in shard_pod.get("affinity", {}).get("podAntiAffinity", {})
    .get("requiredDuringSchedulingIgnoredDuringExecution", []))
if not (spread or anti_affinity):
    fail("the shards do not spread over nodes (kubernetes.io/hostname)")

# Images: tagged by the bundle's commit (k8s_manifests.commit_tag); never
# latest.
image_names = set()
for o, container in containers:
    image = container.get("image", "")
    tag = image_tag(image)
    if tag is None or tag == "latest" or not commit_tag(tag):
        fail(f"{o['metadata']['name']}: image {image!r} is not tagged by a commit")
    name = image.split("@", 1)[0]
    image_names.add(name[:-len(tag) - 1] if tag else name)
if len(image_names) != 1:
    fail(f"the manifests name {len(image_names)} images: {sorted(image_names)}")
# kustomization.yaml's command reads the commit from MANIFEST's first line.
with open(os.path.join(RUNFILES, "deploy/bundle.sh")) as f:
    if not re.search(r'echo "ps-bundle from \$commit,"', f.read()):
        fail("deploy/bundle.sh no longer writes 'ps-bundle from <commit>,' first")
kustomizations = by_kind.get("Kustomization", [])
if len(kustomizations) != 1:
    fail(f"{len(kustomizations)} kustomization.yaml files in deploy/k8s")
else:
    kustomization = kustomizations[0]
    listed = set(kustomization.get("resources", []))
    present = {os.path.basename(p) for p in manifests} - {"kustomization.yaml"}
    if listed != present:
        fail(f"kustomization.yaml lists {sorted(listed)}, deploy/k8s holds {sorted(present)}")
    entries = [i for i in kustomization.get("images", []) if i.get("name") in image_names]
    if len(entries) != 1:
        fail(f"kustomization.yaml sets no tag for {sorted(image_names)}")
    elif not isinstance(entries[0].get("newTag"), str) or not commit_tag(entries[0]["newTag"]):
        fail(f"kustomization.yaml's newTag {entries[0].get('newTag')!r} is not a commit")

# The CronJob: bounded resources, a bounded number of checkpoints.
for cronjob in by_kind.get("CronJob", []):
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    for container in pod["containers"]:
        where = f"CronJob/{cronjob['metadata']['name']} container {container['name']}"
        resources = container.get("resources", {})
        requests, limits = resources.get("requests", {}), resources.get("limits", {})
        if cores(requests.get("cpu")) is None or memory_bytes(requests.get("memory")) is None:
            fail(f"{where}: no CPU and memory requests")
        if memory_bytes(limits.get("memory")) is None:
            fail(f"{where}: no memory limit")
        elif (memory_bytes(requests.get("memory")) or 0) > memory_bytes(limits["memory"]):
            fail(f"{where}: the memory request is over the limit")
        if "cpu" in limits and (cores(limits["cpu"]) or 0) < (cores(requests.get("cpu")) or 0):
            fail(f"{where}: the CPU limit is under the request")
        command = command_of(container)
        if "ps_admin" in command:
            keep = flag_values(command).get("checkpoints_to_keep", "")
            if not re.fullmatch(r"[1-9]\d*", keep):
                fail(f"{where}: --checkpoints_to_keep={keep!r} is not a positive count")

# The workers' GEMM threads are the cores they request.
workers_checked = 0
for o, container in containers:
    command = command_of(container)
    if "ps_worker" not in command:
        continue
    workers_checked += 1
    threads = flag_values(command).get("cpu_threads")
    request = cores(container.get("resources", {}).get("requests", {}).get("cpu"))
    if request is None or not threads or not threads.isdigit() or int(threads) != request:
        fail(f"{o['metadata']['name']}: --cpu_threads={threads} but a CPU request of {request}")
if not workers_checked:
    fail("no ps_worker container")

# No pod calls the Kubernetes API: none gets a service-account token.
pod_templates = [(o, t) for o, t in templates] + [
    (o, o["spec"]["template"]) for o in etcd_objects
    if o.get("kind") == "StatefulSet"]
for o, template in pod_templates:
    if template["spec"].get("automountServiceAccountToken") is not False:
        fail(f"{o['kind']}/{o['metadata']['name']}: automountServiceAccountToken is not false")

# ps-serve: alive by the health port's "liveness" service (SERVING before
# a model arrives; tests/serve_test.cc checks), Ready by its overall
# status; a disruption budget; its metrics port on the Service the
# ServiceMonitor selects.
serve = next(o for o in by_kind["Deployment"] if o["metadata"]["name"] == "ps-serve")
serve_pod = serve["spec"]["template"]["spec"]
serve_container = serve_pod["containers"][0]
serve_flags = flag_values(command_of(serve_container))
serve_ports = {p["name"]: p["containerPort"] for p in serve_container["ports"]}
liveness = serve_container.get("livenessProbe", {}).get("grpc", {})
if liveness != {"port": serve_ports["health"], "service": "liveness"}:
    fail(f"ps-serve's liveness probe is {liveness}, not gRPC 'liveness' on the health port")
if serve_container.get("readinessProbe", {}).get("grpc") != {"port": serve_ports["health"]}:
    fail("ps-serve's readiness probe is not gRPC on the health port")
budgets = [b for b in by_kind.get("PodDisruptionBudget", [])
           if b["spec"]["selector"].get("matchLabels") == serve["spec"]["selector"]["matchLabels"]]
if len(budgets) != 1 or not 1 <= budgets[0]["spec"].get("minAvailable", 0) < serve["spec"]["replicas"]:
    fail("ps-serve has no PodDisruptionBudget keeping one of its pods up")
serve_service = next(o for o in by_kind["Service"] if o["metadata"]["name"] == "ps-serve")
if ({p["name"] for p in serve_service["spec"]["ports"]} != {"grpc", "metrics"}
        or serve_service["metadata"].get("labels", {}).get("app") != "ps-serve"):
    fail("the ps-serve Service does not carry app: ps-serve and its metrics port")

# Worker 0, and no other, exports every EXPORT_EVERY_S into the directory
# ps-serve reads: a path on the volume the shards write exports to (the
# shards write each part), which ps-serve mounts too; with the admin token
# the shards check, mounted where --token_file says.
worker = next(c for o, c in containers if "ps_worker" in command_of(c))
worker_pod = next(t["spec"] for o, t in templates if o["kind"] == "Job")


def exports_of(index, every):
    script = " ".join(worker.get("args", [])).replace("$$", "$")
    script = script.split("exec ", 1)[0] + 'printf %s "$EXPORTS"'
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                          env={"NUM_SHARDS": "2", "ETCD": "", "ETCD_TLS": "",
                               "JOB": config["JOB"], "JOB_COMPLETION_INDEX": str(index),
                               "EXPORT_EVERY_S": every})
    return done.stdout if done.returncode == 0 else f"exit {done.returncode}"


if "${EXPORTS}" not in command_of(worker):
    fail("ps_worker is not given ${EXPORTS}")
if not config.get("EXPORT_EVERY_S", "").isdigit() or int(config["EXPORT_EVERY_S"]) <= 0:
    fail(f"EXPORT_EVERY_S={config.get('EXPORT_EVERY_S')!r}: no exports, so ps-serve is never Ready")
if exports_of(1, "600") or exports_of(0, "0"):
    fail("a worker other than 0, or worker 0 with EXPORT_EVERY_S=0, exports")
exports = flag_values(exports_of(0, "600"))
check_flags("Job/ps-worker EXPORTS", "ps_worker " + exports_of(0, "600"))
if exports.get("export_every_s") != "600":
    fail(f"worker 0 exports with {exports}, not every EXPORT_EVERY_S")
model_dir = serve_flags.get("model_dir", "")
if exports.get("export_dir", "").rstrip("/") != model_dir.rstrip("/"):
    fail(f"worker 0 exports to {exports.get('export_dir')}, ps-serve reads {model_dir}")
shard_mount = mount_of(server, exports.get("export_dir", "/nowhere"))
serve_mount = mount_of(serve_container, model_dir or "/nowhere")
# The worker writes each export's manifest and prunes old exports itself
# (ops/periodic_exporter): the directory is on its own writable mount too.
worker_mount = mount_of(worker, exports.get("export_dir", "/nowhere"))
worker_claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                 for v in worker_pod.get("volumes", [])}
shard_claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                for v in shards["spec"]["template"]["spec"].get("volumes", [])}
serve_claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName")
                for v in serve_pod.get("volumes", [])}
if (shard_mount is None or serve_mount is None or shard_mount.get("readOnly")
        or shard_mount["mountPath"] != serve_mount["mountPath"]
        or shard_claims.get(shard_mount["name"]) is None
        or shard_claims.get(shard_mount["name"]) != serve_claims.get(serve_mount["name"])):
    fail("the export directory is not on one volume the shards write and ps-serve reads")
if (worker_mount is None or worker_mount.get("readOnly") or shard_mount is None
        or worker_mount["mountPath"] != shard_mount["mountPath"]
        or worker_claims.get(worker_mount["name"]) != shard_claims.get(shard_mount["name"])):
    fail("worker 0 cannot write the export directory (its manifest) on the shards' volume")
token = exports.get("token_file", "")
token_mount = mount_of(worker, token) if token else None
shard_token_mount = mount_of(server, server_flags.get("admin_token_file", "/nowhere"))
shard_secrets_by_volume = secrets_of(shards["spec"]["template"]["spec"])
if (token_mount is None or shard_token_mount is None
        or secrets_of(worker_pod).get(token_mount["name"])
        != shard_secrets_by_volume.get(shard_token_mount["name"])):
    fail(f"worker 0's --token_file={token} is not the shards' admin token")

if failures:
    sys.exit(1)
print(f"{len(objects)} objects in {len(manifests)} manifests; {checked} flags checked")
