"""What the checks of deploy/ share: where the binaries are, the flags each
one lists, the command lines a shell text runs, and readers of Kubernetes
quantities and objects. fail() records a failure; the test exits 1 at its
end if there was any.
"""
import os
import re
import subprocess
import sys

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ".."), "parameter_server")
BINARIES = {
    "ps_server": "server/ps_server",
    "ps_serve": "server/ps_serve",
    "ps_admin": "ops/ps_admin",
    "ps_worker": "worker/ps_worker",
    "ps_predict": "worker/predict/ps_predict",
    "clicklog_gen": "worker/datagen/clicklog_gen",
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
    # Abseil's own flags, which --helpfull leaves out.
    return flags | {"help", "helpfull", "version"}


FLAGS = {binary: known_flags(binary) for binary in BINARIES}


def invocations(text):
    """(binary, [flag names]) for each command line in shell text that runs
    one of the binaries."""
    text = re.sub(r"\\\n", " ", text)
    # A substitution inside an argument (--dir=/c/ckpt-$$(date +%F), in a
    # manifest's `$$` escape or a script's `$`) ends no command line: it
    # becomes a word, so that the flags after it are checked too.
    binaries = re.compile(r"\b(%s)\b" % "|".join(BINARIES))
    text = re.sub(r"\$\$?\([^()]*\)",
                  lambda m: m.group(0) if binaries.search(m.group(0)) else "SUBST", text)
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
    """--flag=value pairs, the value without the quotes and semicolon that
    end a shell assignment (SHARDS="--servers=${SERVERS}";)."""
    return {flag: value.rstrip("\"';")
            for flag, value in re.findall(r"--([a-z0-9_]+)=(\S+)", command)}


def shard_flags(command):
    """The flags a command line takes from its SHARDS assignments, the way
    the workers and checkpoints pick --servers or --etcd (config.yaml's
    ETCD)."""
    return re.findall(r'SHARDS="([^"]*)"', command)


def command_of(container):
    return " ".join(container.get("command", []) + container.get("args", []))


def mebibytes(quantity):
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()
    return int(number) * (1024 if unit == "Gi" else 1)


def cores(quantity):
    """A CPU quantity ("2", "0.5", "2000m") in cores; None if malformed."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m?)", str(quantity))
    if not match:
        return None
    return float(match.group(1)) / (1000 if match.group(2) else 1)


def memory_bytes(quantity):
    """A memory quantity ("64Mi", "1G", "512") in bytes; None if malformed."""
    units = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(quantity))
    if not match:
        return None
    return int(match.group(1)) * units[match.group(2) or ""]


def image_tag(image):
    """The tag of an image reference (None without one): the part after the
    last ':' that follows the last '/' (a registry's port is not a tag)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def volume_kinds(o, pod):
    """Volume name -> its source's kind ("persistentVolumeClaim" for a
    StatefulSet's volumeClaimTemplates)."""
    kinds = {}
    for volume in pod.get("volumes", []):
        sources = [key for key in volume if key != "name"]
        kinds[volume["name"]] = sources[0] if len(sources) == 1 else None
    for claim in o.get("spec", {}).get("volumeClaimTemplates", []):
        kinds[claim["metadata"]["name"]] = "persistentVolumeClaim"
    return kinds


def mount_of(container, path):
    """The volumeMount that holds `path` (the longest mountPath above it)."""
    best = None
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/")
        if (path == root or path.startswith(root + "/")) and (
                best is None or len(root) > len(best["mountPath"].rstrip("/"))):
            best = mount
    return best


def secrets_of(pod):
    """Volume name -> Secret name, for every Secret a pod mounts (directly or
    projected)."""
    names = {}
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            names[volume["name"]] = volume["secret"].get("secretName")
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                names[volume["name"]] = source["secret"].get("name")
    return names


# Images are tagged by the bundle's commit: the manifests carry the
# placeholder that kustomization.yaml's newTag replaces (or a commit).
PLACEHOLDER = "COMMIT"


def commit_tag(tag):
    return tag == PLACEHOLDER or bool(re.fullmatch(r"[0-9a-f]{7,40}", tag or ""))
