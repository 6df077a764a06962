# SPDX-License-Identifier: Apache-2.0
"""tests/test_deploy_k8s.py — the Kubernetes manifests (deploy/k8s/) checked without a cluster.

No cluster runs here, so this is what can be checked with real tools:

1. kubectl (Debian's kubernetes-client, 1.20) renders them client-side:
   `kubectl create --dry-run=client --validate=false -o json -k deploy/k8s` (and -f for
   secret.example.yaml, which the kustomization leaves out). kubectl still wants an API
   server to map kinds to resources, so it gets a kubeconfig naming an unreachable server
   (https://127.0.0.1:1) and a discovery cache (--cache-dir) written from the schema
   fixture's kinds; nothing is contacted. `kubectl apply --dry-run=client` cannot run
   offline: it GETs each object's live state first. `--validate=true` needs the server's
   OpenAPI document, which the cache cannot hold, hence 2.
2. Each rendered object against its kind's schema in tests/fixtures/k8s-schema/v1.20.json
   (written from the v1.20 API reference): required fields, types, enums, unknown fields
   rejected; plus the references between objects the API server or the controllers would
   trip on (selectors and labels, volumes, Secret keys, the headless Service).
3. The commands the containers run are the commands deploy/slurm/shoal.sbatch runs (which
   tests/test_deploy_slurm.c runs under a real Slurm): each is run with stand-in programs
   that record their argv, and the program and flags must agree for `shoal init`, the
   learner and the actors, for an Ape-X, an IMPALA and a PPO config.
4. Broken manifests (a missing required field, a misspelt field, a wrong type, a selector
   that matches nothing, a command flag the Slurm script does not pass) must fail 2 or 3.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(os.environ.get("SHOAL_SOURCE_DIR", Path(__file__).resolve().parent.parent))
K8S = SRC / "deploy" / "k8s"
SBATCH = SRC / "deploy" / "slurm" / "shoal.sbatch"
SCHEMA = json.loads((SRC / "tests" / "fixtures" / "k8s-schema" / "v1.20.json").read_text())
DEFS = SCHEMA["definitions"]
SERVER = "https://127.0.0.1:1"  # nothing listens on port 1: a call would fail at once
# A resource quantity (k8s.io/apimachinery resource.Quantity): a decimal with an optional
# binary (Ki..Ei), decimal (n, u, m, k, M, G, T, P, E) or exponent suffix.
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")


def kubectl_path():
    path = shutil.which("kubectl")
    if not path:
        pytest.fail("kubectl not found: `make deps` installs Debian's kubernetes-client")
    return path


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory):
    """kubectl's argv prefix for offline client-side rendering (see the module comment)."""
    home = tmp_path_factory.mktemp("kube")
    (home / "config").write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: offline, cluster: {{server: '{SERVER}'}}}}]\n"
        "users: [{name: offline, user: {token: offline}}]\n"
        "contexts: [{name: offline, context: {cluster: offline, user: offline, namespace: default}}]\n"
        "current-context: offline\n")
    # The cache layout of client-go's disk-cached discovery: <cache>/discovery/<host_port>/
    # servergroups.json and <group>/<version>/serverresources.json, fresh for 10 minutes.
    disc = home / "cache" / "discovery" / "127.0.0.1_1"
    groups = {}
    for gvk, kind in SCHEMA["kinds"].items():
        gv = gvk.rsplit("/", 1)[0]
        groups.setdefault(gv, []).append(kind)
    glist = []
    for gv, kinds in groups.items():
        group, version = gv.split("/") if "/" in gv else ("", gv)
        ref = {"groupVersion": gv, "version": version}
        glist.append({"name": group, "versions": [ref], "preferredVersion": ref})
        d = disc / gv
        d.mkdir(parents=True)
        (d / "serverresources.json").write_text(json.dumps({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [{"name": SCHEMA["resources"][k], "singularName": "", "namespaced": True,
                           "kind": k, "verbs": ["create", "get", "list", "patch", "delete"]}
                          for k in kinds]}))
    (disc / "servergroups.json").write_text(
        json.dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": glist}))
    return [kubectl_path(), "--kubeconfig", str(home / "config"), "--cache-dir",
            str(home / "cache"), "--request-timeout", "5s"]


def render(kubectl, *source):
    """The objects kubectl renders client-side from `-k DIR` or `-f FILE`."""
    r = subprocess.run(kubectl + ["create", "--dry-run=client", "--validate=false", "-o", "json",
                                  *source], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"kubectl create --dry-run=client {source}: {r.stderr}"
    objs, dec, text, i = [], json.JSONDecoder(), r.stdout, 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            break
        obj, i = dec.raw_decode(text, i)
        objs.extend(obj["items"] if obj.get("kind") == "List" else [obj])
    return objs


def render_all(kubectl, k8s_dir=K8S):
    return render(kubectl, "-k", str(k8s_dir)) + render(kubectl, "-f",
                                                        str(k8s_dir / "secret.example.yaml"))


# --- 2. the schema ---------------------------------------------------------------------

def check_value(value, schema, path, errs):
    if "$ref" in schema:
        return check_value(value, DEFS[schema["$ref"]], path, errs)
    if value is None:
        if not schema.get("nullable"):
            errs.append(f"{path}: null")
        return
    fmt, t = schema.get("format"), schema.get("type")
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if fmt == "int-or-string" and not (is_int or isinstance(value, str)):
        errs.append(f"{path}: {value!r} is neither an integer nor a string")
    if fmt == "quantity" and not (is_int or isinstance(value, float) or
                                  (isinstance(value, str) and QUANTITY.match(value))):
        errs.append(f"{path}: {value!r} is not a resource quantity")
    want = {"string": isinstance(value, str), "integer": is_int,
            "number": is_int or isinstance(value, float), "boolean": isinstance(value, bool),
            "object": isinstance(value, dict), "array": isinstance(value, list)}
    if t and not want[t]:
        errs.append(f"{path}: {type(value).__name__} {value!r:.60}, wanted {t}")
        return
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if t == "object" and "properties" in schema:
        for k in schema.get("required", []):
            if k not in value:
                errs.append(f"{path}: required field {k} missing")
        for k, v in value.items():
            if k not in schema["properties"]:
                errs.append(f"{path}.{k}: unknown field")
            else:
                check_value(v, schema["properties"][k], f"{path}.{k}", errs)
    elif t == "object" and "additionalProperties" in schema:
        for k, v in value.items():
            check_value(v, schema["additionalProperties"], f"{path}.{k}", errs)
    elif t == "array" and "items" in schema:
        for i, v in enumerate(value):
            check_value(v, schema["items"], f"{path}[{i}]", errs)


def pod_spec(obj):
    return obj.get("spec", {}).get("template", {}).get("spec", {})


def check_objects(objs):
    """Every error in objs against the schema and against each other; [] when all is well."""
    errs = []
    by_kind = {}
    for obj in objs:
        gvk = f"{obj.get('apiVersion')}/{obj.get('kind')}"
        name = obj.get("metadata", {}).get("name")
        where = f"{obj.get('kind')}/{name}"
        if gvk not in SCHEMA["kinds"]:
            errs.append(f"{where}: kind {gvk} is not in the schema fixture")
            continue
        if not name:
            errs.append(f"{where}: metadata.name missing")
        check_value(obj, DEFS[SCHEMA["kinds"][gvk]], where, errs)
        by_kind.setdefault(obj["kind"], {})[name] = obj
    if errs:
        return errs
    services, secrets = by_kind.get("Service", {}), by_kind.get("Secret", {})
    configmaps = by_kind.get("ConfigMap", {})
    workloads = {**by_kind.get("Deployment", {}), **by_kind.get("StatefulSet", {})}
    pod_labels = []
    for name, w in workloads.items():
        where = f"{w['kind']}/{name}"
        labels = w["spec"]["template"].get("metadata", {}).get("labels", {})
        pod_labels.append(labels)
        sel = w["spec"]["selector"].get("matchLabels", {})
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            errs.append(f"{where}: selector {sel} does not match the pod labels {labels}")
        if w["kind"] == "StatefulSet":
            svc = services.get(w["spec"]["serviceName"])
            if not svc or svc["spec"].get("clusterIP") != "None":
                errs.append(f"{where}: serviceName {w['spec']['serviceName']} is no headless "
                            "Service here")
        spec = pod_spec(w)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "configMap" in v and v["configMap"].get("name") not in configmaps:
                errs.append(f"{where}: volume {v['name']} names no ConfigMap here")
        for c in spec.get("initContainers", []) + spec["containers"]:
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    errs.append(f"{where}: container {c['name']} mounts unknown volume {m['name']}")
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    s = secrets.get(ref.get("name"))
                    keys = set(s.get("stringData", {})) | set(s.get("data", {})) if s else set()
                    if ref["key"] not in keys:
                        errs.append(f"{where}: env {e['name']} wants key {ref['key']} of Secret "
                                    f"{ref.get('name')}, which has {sorted(keys)}")
            ports = {p.get("name") for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                port = c.get(probe, {}).get("tcpSocket", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    errs.append(f"{where}: {probe} names port {port}, not one of {ports}")
    for name, svc in services.items():
        sel = svc["spec"].get("selector", {})
        if not any(all(lab.get(k) == v for k, v in sel.items()) for lab in pod_labels):
            errs.append(f"Service/{name}: selector {sel} matches no pod template here")
    # shoal's own rule: the actor StatefulSet's replicas equal the config's `actors`.
    for name, cm in configmaps.items():
        m = re.search(r"^actors: *(\d+)", cm.get("data", {}).get("config.yaml", ""), re.M)
        for w in by_kind.get("StatefulSet", {}).values():
            if m and w["spec"].get("replicas", 1) != int(m.group(1)):
                errs.append(f"StatefulSet/{w['metadata']['name']}: replicas "
                            f"{w['spec'].get('replicas', 1)} but ConfigMap/{name} says actors: "
                            f"{m.group(1)}")
    return errs


def test_render_offline(kubectl):
    objs = render_all(kubectl)
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)
    assert kinds == ["ConfigMap/shoal-config", "Deployment/shoal-learner", "Secret/shoal-store",
                     "Service/shoal-actor", "Service/shoal-learner", "StatefulSet/shoal-actor"]


def test_schema(kubectl):
    errs = check_objects(render_all(kubectl))
    assert errs == [], "\n".join(errs)


# --- 3. the commands, against deploy/slurm/shoal.sbatch ----------------------------------

PROGRAMS = ["shoal", "shoal-learner", "shoal-actor", "shoal-onpolicy-learner",
            "shoal-onpolicy-actor"]
# A stand-in program: appends its name and argv (unit-separated) to $FAKE_LOG; `shoal init
# CONFIG ... --out FILE` also writes FILE (the config as given). The learner waits (at most
# 10 s) for an actor to have run when $FAKE_WAIT is set, as the Slurm script stops the actor
# step once the learner ends. Each line goes out in one write: the learner and an actor run
# at once, and a printf per argument interleaved their lines (a flake in make test).
FAKE = r"""#!/bin/sh
us=$(printf '\037'); line=${0##*/}; for a in "$@"; do line="$line$us$a"; done
printf '%s\n' "$line" >>"$FAKE_LOG"
case "${0##*/}" in
  shoal) cfg=$2; while [ $# -gt 0 ]; do [ "$1" = --out ] && cp "$cfg" "$2"; shift; done ;;
  *-actor) : >"$FAKE_LOG.actor" ;;
  *-learner) [ -n "$FAKE_WAIT" ] && for i in $(seq 100); do [ -e "$FAKE_LOG.actor" ] && break; sleep 0.1; done ;;
esac
exit 0
"""


def fake_bin(d):
    d.mkdir()
    for p in PROGRAMS:
        (d / p).write_text(FAKE)
        (d / p).chmod(0o755)
    return d


def read_log(log):
    if not log.exists():
        return []
    return [line.split("\x1f") for line in log.read_text().splitlines()]


def signature(argv):
    """A command's program and its flags (a --set by its key), in order; values of flags and
    positional arguments (paths, hosts, run names) differ by place and are left out."""
    out, i = [argv[0] + (" " + argv[1] if argv[0] == "shoal" else "")], 2 if argv[0] == "shoal" else 1
    while i < len(argv):
        a = argv[i]
        takes_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if a == "--set":
            out.append("--set " + argv[i + 1].split("=", 1)[0])
        elif a.startswith("--"):
            out.append(a)
        else:
            out.append("<arg>")
            takes_value = False
        i += 2 if a.startswith("--") and takes_value else 1
    return out


def slurm_commands(tmp, config):
    """What shoal.sbatch runs for config: [init, learner, actor] argvs (srun, scontrol and
    squeue stand-ins; one node, one actor, the plain environment a user gives it)."""
    fb = fake_bin(tmp / "slurm-bin")
    for name, body in [("srun", 'while [ "${1#-}" != "$1" ]; do shift; done\n'
                                'SLURM_PROCID=0 exec "$@"'),
                       ("scontrol", "echo node1"), ("squeue", 'echo "$SLURM_JOB_ID.0"')]:
        (fb / name).write_text(f"#!/bin/sh\n{body}\n")
        (fb / name).chmod(0o755)
    log = tmp / "slurm.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "SLURM_"))}
    env.update(PATH=f"{fb}:{os.environ['PATH']}", SHOAL_BIN=str(fb), SHOAL_TOKEN="tok",
               SHOAL_STORE_URI=f"file://{tmp}/runs", SLURM_JOB_NODELIST="node1",
               SLURM_JOB_ID="7", SLURM_JOB_CPUS_PER_NODE="2", FAKE_LOG=str(log), FAKE_WAIT="1")
    r = subprocess.run(["bash", str(SBATCH), str(config), "run1"], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"shoal.sbatch: {r.stdout}{r.stderr}"
    # The learner and the actors start in the background, so on a loaded machine an actor
    # may log before the learner: the order compared is by role, not by arrival.
    cmds = read_log(log)
    return cmds[:1] + sorted(cmds[1:], key=lambda a: "actor" in a[0])


def expand(s, env):
    """Kubernetes' $(VAR) expansion of command and args from the container's env."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), s)


def k8s_commands(tmp, objs, config):
    """What the containers run, each in the environment its manifest gives it, with the
    ConfigMap's config.yaml replaced by config: [init, learner, actor] argvs."""
    fb = fake_bin(tmp / "k8s-bin")
    log = tmp / "k8s.log"
    secrets = {o["metadata"]["name"]: o.get("stringData", {}) for o in objs if o["kind"] == "Secret"}
    pods = {o["metadata"]["name"]: pod_spec(o) for o in objs
            if o["kind"] in ("Deployment", "StatefulSet")}
    resolved = tmp / "resolved.yaml"
    for pod, cname in [("shoal-learner", "init-run"), ("shoal-learner", "learner"),
                       ("shoal-actor", "actor")]:
        spec = pods[pod]
        c = next(c for c in spec.get("initContainers", []) + spec["containers"]
                 if c["name"] == cname)
        env = {"PATH": f"{fb}:{os.environ['PATH']}", "FAKE_LOG": str(log),
               "HOSTNAME": f"{pod}-3"}
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            env[e["name"]] = secrets[ref["name"]][ref["key"]] if ref else expand(e["value"], env)
        # The pod's paths (/etc/shoal/config.yaml from the ConfigMap, /work the emptyDir)
        # are the test's files.
        argv = [expand(a, env).replace("/etc/shoal/config.yaml", str(config))
                .replace("/work/resolved.yaml", str(resolved))
                for a in c.get("command", []) + c.get("args", [])]
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"{pod}/{cname}: {argv}: {r.stderr}"
    return read_log(log)


def compare_commands(tmp, objs, config):
    """The differences between what Slurm and Kubernetes run for config; [] when none."""
    sl = slurm_commands(tmp, config)
    k8 = k8s_commands(tmp, objs, config)
    if len(sl) != 3 or len(k8) != 3:
        return [f"wanted init, learner and actor; Slurm ran {sl}, Kubernetes {k8}"]
    errs = []
    for role, a, b in zip(["init", "learner", "actor"], sl, k8):
        if signature(a) != signature(b):
            errs.append(f"{role}: Slurm runs {signature(a)}, Kubernetes {signature(b)}")
    return errs


@pytest.mark.parametrize("config, learner", [
    ("cartpole-apex.yaml", "shoal-learner"), ("cartpole-impala.yaml", "shoal-onpolicy-learner"),
    ("cartpole-ppo.yaml", "shoal-onpolicy-learner")])
def test_commands_match_slurm(kubectl, tmp_path, config, learner):
    objs = render_all(kubectl)
    cfg = SRC / "configs" / config
    assert compare_commands(tmp_path, objs, cfg) == []
    # And the programs are the ones the config's algo names, with the actor's index the
    # pod's ordinal and the learner its Service.
    k8 = read_log(tmp_path / "k8s.log")
    assert [a[0] for a in k8] == ["shoal", learner, learner.replace("learner", "actor")]
    actor = k8[2]
    assert actor[actor.index("--index") + 1] == "3"
    assert actor[actor.index("--learner") + 1] == "shoal-learner:50051"
    assert "--resume" in k8[1]


# --- 4. broken manifests must fail -------------------------------------------------------

def broken_copy(tmp, file, old, new):
    d = tmp / "k8s"
    shutil.copytree(K8S, d)
    text = (d / file).read_text()
    assert old in text, f"{file} no longer holds {old!r}: update the broken case"
    (d / file).write_text(text.replace(old, new, 1))
    return d


@pytest.mark.parametrize("file, old, new, want", [
    # a required field gone: a StatefulSet needs serviceName
    ("actors.yaml", "  serviceName: shoal-actor\n", "", "required field serviceName missing"),
    # a misspelt field (unknown fields are rejected)
    ("learner.yaml", "      terminationGracePeriodSeconds: 60",
     "      terminationGracePeriodSecond: 60", "terminationGracePeriodSecond: unknown field"),
    # a wrong type: replicas as a string
    ("actors.yaml", "  replicas: 4\n", "  replicas: \"4\"\n", "replicas: str '4', wanted integer"),
    # a value outside its enum
    ("learner.yaml", "strategy: {type: Recreate}", "strategy: {type: Recreate1}",
     "is not one of"),
    # a bad quantity
    ("actors.yaml", "memory: 512Mi", "memory: 512MB", "is not a resource quantity"),
    # a selector that matches no pod
    ("learner.yaml", "    matchLabels: {app.kubernetes.io/name: shoal, app.kubernetes.io/component: learner}",
     "    matchLabels: {app.kubernetes.io/name: shoal, app.kubernetes.io/component: lerner}",
     "does not match the pod labels"),
    # a Secret key the Secret lacks
    ("actors.yaml", "secretKeyRef: {name: shoal-store, key: token}",
     "secretKeyRef: {name: shoal-store, key: tokn}", "wants key tokn"),
    # replicas out of step with the config's actors
    ("configmap.yaml", "actors: 4 ", "actors: 3 ", "says actors: 3"),
])
def test_broken_manifest_fails_schema(kubectl, tmp_path, file, old, new, want):
    errs = check_objects(render_all(kubectl, broken_copy(tmp_path, file, old, new)))
    assert any(want in e for e in errs), f"wanted an error with {want!r}, got {errs}"


@pytest.mark.parametrize("file, old, new, want", [
    # an actor given a flag the Slurm script does not pass
    ("actors.yaml", "--index \"${HOSTNAME##*-}\"", "--index \"${HOSTNAME##*-}\" --verbose",
     "actor: Slurm runs"),
    # a learner that does not resume
    ("learner.yaml", "--run \"$SHOAL_RUN\" --resume", "--run \"$SHOAL_RUN\"",
     "learner: Slurm runs"),
    # shoal init without the store override
    ("learner.yaml", "--set, \"store.uri=$(SHOAL_STORE_URI)\",", "", "init: Slurm runs"),
])
def test_broken_command_fails(kubectl, tmp_path, file, old, new, want):
    objs = render_all(kubectl, broken_copy(tmp_path, file, old, new))
    errs = compare_commands(tmp_path, objs, SRC / "configs" / "cartpole-apex.yaml")
    assert any(want in e for e in errs), f"wanted an error with {want!r}, got {errs}"
