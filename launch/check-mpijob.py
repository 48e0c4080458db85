#!/usr/bin/env python3
"""Check a Kubeflow MPI Operator MPIJob manifest (kubeflow.org/v2beta1) for burnin.

kubeconform is not packaged in Debian, so this checks the parts of the v2beta1 schema
that matter here (from the operator's CRD: field names, required fields, enums, types),
plus burnin's own rules: every worker asks for GPUs with `nvidia.com/gpu`,
slotsPerWorker equals that count, the launcher's `-np` equals workers x slots; the
launcher waits for the workers (launcherCreationPolicy: WaitForWorkersReady) and each
worker has a readiness probe on sshd's port 22, so "ready" means sshd listens; one
attempt only (launcher restartPolicy Never, runPolicy.backoffLimit 0: a FAIL after
hours is a verdict, not a crash to retry); the ssh Secret goes to /root/.ssh, where
the image's root ssh looks; the launcher keeps its results on a PersistentVolumeClaim,
and a PersistentVolumeClaim beside it is ReadWriteMany.

    check-mpijob.py FILE...      exit 0 when every file passes, 1 with the reasons
    check-mpijob.py --self-test  prove the checker rejects broken manifests
"""
import copy
import re
import sys

try:
    import yaml
except ImportError:  # Debian: python3-yaml (launch/setup installs it)
    sys.exit("check-mpijob: PyYAML is missing (apt-get install python3-yaml)")

# Field names of the v2beta1 MPIJob spec, its replica specs and run policy.
SPEC_FIELDS = {"launcherCreationPolicy", "mpiImplementation", "mpiReplicaSpecs",
               "runLauncherAsWorker", "runPolicy", "slotsPerWorker", "sshAuthMountPath"}
REPLICA_FIELDS = {"replicas", "restartPolicy", "template"}
RUN_POLICY_FIELDS = {"activeDeadlineSeconds", "backoffLimit", "cleanPodPolicy", "managedBy",
                     "schedulingPolicy", "suspend", "ttlSecondsAfterFinished"}
ENUMS = {
    "mpiImplementation": {"OpenMPI", "Intel", "MPICH"},
    "launcherCreationPolicy": {"AtStartup", "WaitForWorkersReady"},
    "cleanPodPolicy": {"None", "Running", "All"},
    # What the operator's validation accepts for a replica (ExitCode is a type, refused there).
    "restartPolicy": {"OnFailure", "Never"},
}
SSH_PORT = 22
SSH_MOUNT = "/root/.ssh"
GPU = "nvidia.com/gpu"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check(doc):
    """Problems with one parsed manifest (an empty list when it passes)."""
    errs = []
    if not isinstance(doc, dict):
        return ["the document is not a mapping"]
    if doc.get("apiVersion") != "kubeflow.org/v2beta1":
        errs.append(f"apiVersion is {doc.get('apiVersion')!r}, not 'kubeflow.org/v2beta1'")
    if doc.get("kind") != "MPIJob":
        errs.append(f"kind is {doc.get('kind')!r}, not 'MPIJob'")
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not DNS_LABEL.match(name):
        errs.append(f"metadata.name {name!r} is not a DNS-1123 label")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return errs + ["spec is missing"]
    for k in sorted(set(spec) - SPEC_FIELDS):
        errs.append(f"spec.{k} is not a field of the v2beta1 MPIJob spec")
    for k in ("mpiImplementation", "launcherCreationPolicy"):
        if k in spec and spec[k] not in ENUMS[k]:
            errs.append(f"spec.{k} {spec[k]!r} is not one of {sorted(ENUMS[k])}")
    slots = spec.get("slotsPerWorker", 1)
    if not is_int(slots) or slots < 1:
        errs.append(f"spec.slotsPerWorker {slots!r} is not an integer >= 1")
    rp = spec.get("runPolicy", {})
    if not isinstance(rp, dict):
        errs.append("spec.runPolicy is not a mapping")
    else:
        for k in sorted(set(rp) - RUN_POLICY_FIELDS):
            errs.append(f"spec.runPolicy.{k} is not a field of the v2beta1 run policy")
        if "cleanPodPolicy" in rp and rp["cleanPodPolicy"] not in ENUMS["cleanPodPolicy"]:
            errs.append(f"spec.runPolicy.cleanPodPolicy {rp['cleanPodPolicy']!r} is not one of {sorted(ENUMS['cleanPodPolicy'])}")
        for k in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
            if k in rp and (not is_int(rp[k]) or rp[k] < 0):
                errs.append(f"spec.runPolicy.{k} {rp[k]!r} is not an integer >= 0")
    specs = spec.get("mpiReplicaSpecs")
    if not isinstance(specs, dict):
        return errs + ["spec.mpiReplicaSpecs (required) is missing"]
    for k in sorted(set(specs) - {"Launcher", "Worker"}):
        errs.append(f"spec.mpiReplicaSpecs.{k}: only Launcher and Worker exist")
    if spec.get("launcherCreationPolicy") != "WaitForWorkersReady":
        errs.append("spec.launcherCreationPolicy is not WaitForWorkersReady: the launcher may start before the workers' sshd")
    launcher_restart = (specs.get("Launcher") or {}).get("restartPolicy")
    if "Launcher" in specs and launcher_restart != "Never":
        errs.append(f"spec.mpiReplicaSpecs.Launcher.restartPolicy is {launcher_restart!r}, not 'Never': "
                    "a launcher that exits 1 (a criterion failed) would run the whole acceptance again")
    backoff = rp.get("backoffLimit") if isinstance(rp, dict) else None
    if backoff != 0:
        errs.append(f"spec.runPolicy.backoffLimit is {backoff!r}, not 0: the launcher Job would start a new pod "
                    "after a failed one (Kubernetes' default is 6)")
    mount = spec.get("sshAuthMountPath", SSH_MOUNT)
    if mount != SSH_MOUNT:
        errs.append(f"spec.sshAuthMountPath is {mount!r}: burnin's image runs ssh and sshd as root, which read {SSH_MOUNT}")
    replicas = {}
    containers = {}
    for role in ("Launcher", "Worker"):
        where = f"spec.mpiReplicaSpecs.{role}"
        rs = specs.get(role)
        if not isinstance(rs, dict):
            errs.append(f"{where} is missing")
            continue
        for k in sorted(set(rs) - REPLICA_FIELDS):
            errs.append(f"{where}.{k} is not a field of a replica spec")
        n = rs.get("replicas")
        if not is_int(n) or n < 1:
            errs.append(f"{where}.replicas {n!r} is not an integer >= 1")
        replicas[role] = n
        if "restartPolicy" in rs and rs["restartPolicy"] not in ENUMS["restartPolicy"]:
            errs.append(f"{where}.restartPolicy {rs['restartPolicy']!r} is not one of {sorted(ENUMS['restartPolicy'])}")
        pod = ((rs.get("template") or {}).get("spec")) or {}
        cs = pod.get("containers")
        if not isinstance(cs, list) or not cs:
            errs.append(f"{where}.template.spec.containers (required) is missing or empty")
            continue
        containers[role] = cs
        for i, c in enumerate(cs):
            cw = f"{where}.template.spec.containers[{i}]"
            if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c.get("name"):
                errs.append(f"{cw}.name (required) is missing")
                continue
            if not isinstance(c.get("image"), str) or not c["image"]:
                errs.append(f"{cw}.image is missing")
    for i, c in enumerate(containers.get("Worker", [])[:1]):
        probe = c.get("readinessProbe") or {}
        port = (probe.get("tcpSocket") or {}).get("port")
        named = {p.get("name"): p.get("containerPort") for p in c.get("ports") or [] if isinstance(p, dict)}
        if port != SSH_PORT and named.get(port) != SSH_PORT:
            errs.append(f"spec.mpiReplicaSpecs.Worker.template.spec.containers[{i}].readinessProbe is not a tcpSocket "
                        f"probe on port {SSH_PORT}: a worker is then ready before its sshd listens, and "
                        "WaitForWorkersReady starts the launcher too early")
    lpod = (((specs.get("Launcher") or {}).get("template") or {}).get("spec")) or {}
    pvcs = {v.get("name") for v in lpod.get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)}
    if "Launcher" in containers and not any(
            m.get("name") in pvcs for c in containers["Launcher"] for m in c.get("volumeMounts") or []
            if isinstance(m, dict)):
        errs.append("the launcher mounts no PersistentVolumeClaim: its results and report would go with the pod")
    if replicas.get("Launcher") not in (None, 1) and is_int(replicas.get("Launcher")):
        errs.append(f"spec.mpiReplicaSpecs.Launcher.replicas is {replicas['Launcher']}: the operator runs exactly 1 launcher")
    gpus = []
    for i, c in enumerate(containers.get("Worker", [])):
        limits = ((c.get("resources") or {}).get("limits")) or {}
        g = limits.get(GPU)
        if not is_int(g) or g < 1:
            errs.append(f"spec.mpiReplicaSpecs.Worker.template.spec.containers[{i}].resources.limits[{GPU!r}] {g!r} is not an integer >= 1")
        else:
            gpus.append(g)
    if gpus and is_int(slots) and sum(gpus) != slots:
        errs.append(f"spec.slotsPerWorker is {slots} but each worker asks for {sum(gpus)} GPU(s): one rank per GPU needs them equal")
    workers = replicas.get("Worker")
    if is_int(workers) and is_int(slots):
        want = workers * slots
        text = " ".join(
            " ".join(str(x) for x in (c.get("command") or []) + (c.get("args") or []))
            for c in containers.get("Launcher", []))
        # Each line with an mpirun: one rank per GPU (-np = workers x slots, ppr:slots),
        # or one rank per node (-np = workers, ppr:1:node: evidence).
        lines = [l for l in text.splitlines() if "mpirun" in l]
        if not any(re.search(r"(?:-np|-n)\s+\d+", l) for l in lines):
            errs.append("the launcher runs no `mpirun -np N`")
        for l in lines:
            nps = [int(x) for x in re.findall(r"(?:-np|-n)\s+(\d+)", l)]
            pprs = [int(x) for x in re.findall(r"ppr:(\d+):node", l)]
            per_node = workers in nps and pprs == [1]
            for n in nps:
                if n != want and not per_node:
                    errs.append(f"the launcher's -np {n} is not Worker.replicas x slotsPerWorker = {want}")
            for p in pprs:
                if p != slots and not per_node:
                    errs.append(f"the launcher maps ppr:{p}:node but slotsPerWorker is {slots}")
    return errs


def check_pvc(doc):
    """Problems with a PersistentVolumeClaim shipped beside the MPIJob."""
    modes = ((doc.get("spec") or {}).get("accessModes")) or []
    name = (doc.get("metadata") or {}).get("name")
    if "ReadWriteMany" not in modes:
        return [f"PersistentVolumeClaim {name!r} is not ReadWriteMany: the pods cannot all mount it"]
    return []


def check_doc(doc):
    if isinstance(doc, dict) and doc.get("kind") == "PersistentVolumeClaim":
        return check_pvc(doc)
    return check(doc)


def self_test(path):
    """Every mutation below must be caught; the file itself must pass."""
    docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    base = next(d for d in docs if d.get("kind") == "MPIJob")
    assert check(base) == [], check(base)
    for d in docs:
        assert check_doc(d) == [], check_doc(d)

    def w(d):
        return d["spec"]["mpiReplicaSpecs"]["Worker"]

    def wc(d):
        return w(d)["template"]["spec"]["containers"][0]

    def lw(d):
        return d["spec"]["mpiReplicaSpecs"]["Launcher"]

    # Each broken variant, and a word that the reason it is refused must contain (so a
    # variant is refused for its own fault, not for another one).
    mutations = {
        "apiVersion v1": ("apiVersion", lambda d: d.update(apiVersion="kubeflow.org/v1")),
        "kind": ("kind", lambda d: d.update(kind="Job")),
        "no GPU limit": (GPU, lambda d: wc(d)["resources"]["limits"].pop(GPU)),
        "GPU limit as text": (GPU, lambda d: wc(d)["resources"]["limits"].update({GPU: "8"})),
        "no launcher": ("Launcher is missing", lambda d: d["spec"]["mpiReplicaSpecs"].pop("Launcher")),
        "no worker replicas": ("Worker.replicas", lambda d: w(d).pop("replicas")),
        "two launchers": ("exactly 1 launcher", lambda d: lw(d).update(replicas=2)),
        "slots != GPUs": ("slotsPerWorker", lambda d: d["spec"].update(slotsPerWorker=4)),
        "np != workers x slots": ("-np", lambda d: w(d).update(replicas=3)),
        "unknown spec field": ("slotsPerNode", lambda d: d["spec"].update(slotsPerNode=8)),
        "unknown replica type": ("Master", lambda d: d["spec"]["mpiReplicaSpecs"].update(Master={})),
        "bad clean policy": ("cleanPodPolicy", lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes")),
        "no containers": ("containers", lambda d: w(d)["template"]["spec"].update(containers=[])),
        "nameless container": ("name", lambda d: wc(d).pop("name")),
        "bad name": ("metadata.name", lambda d: d["metadata"].update(name="Burn_In")),
        "launcher at start-up": ("WaitForWorkersReady", lambda d: d["spec"].update(launcherCreationPolicy="AtStartup")),
        "launcher restarted on failure": ("Launcher.restartPolicy", lambda d: lw(d).update(restartPolicy="OnFailure")),
        "launcher restart policy ExitCode": ("Launcher.restartPolicy", lambda d: lw(d).update(restartPolicy="ExitCode")),
        "backoffLimit 2": ("backoffLimit", lambda d: d["spec"]["runPolicy"].update(backoffLimit=2)),
        "no backoffLimit (Kubernetes' 6)": ("backoffLimit", lambda d: d["spec"]["runPolicy"].pop("backoffLimit")),
        "no readiness probe": ("readinessProbe", lambda d: wc(d).pop("readinessProbe")),
        "readiness probe on port 2222": ("readinessProbe", lambda d: wc(d)["readinessProbe"]["tcpSocket"].update(port=2222)),
        "readiness probe by exec": ("readinessProbe", lambda d: wc(d).update(readinessProbe={"exec": {"command": ["true"]}})),
        "results on an emptyDir": ("PersistentVolumeClaim", lambda d: lw(d)["template"]["spec"].update(
            volumes=[{"name": "results", "emptyDir": {}}])),
        "ssh keys elsewhere": ("sshAuthMountPath", lambda d: d["spec"].update(sshAuthMountPath="/home/mpiuser/.ssh")),
    }
    missed = []
    for what, (word, mutate) in mutations.items():
        d = copy.deepcopy(base)
        mutate(d)
        errs = check(d)
        if not any(word in e for e in errs):
            missed.append(f"{what} (reasons given: {errs or 'none'})")
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "x"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    if not check_doc(pvc):
        missed.append("ReadWriteOnce volume")
    if missed:
        sys.exit(f"check-mpijob self-test: not caught: {', '.join(missed)}")
    print(f"check-mpijob self-test: {len(mutations) + 1} broken variants of {path} rejected")


def main(argv):
    if len(argv) >= 2 and argv[0] == "--self-test":
        for p in argv[1:]:
            self_test(p)
        return 0
    if not argv:
        print(__doc__.strip())
        return 2
    bad = 0
    for p in argv:
        try:
            docs = [d for d in yaml.safe_load_all(open(p)) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            print(f"{p}: {e}")
            bad += 1
            continue
        for i, d in enumerate(docs):
            for e in check_doc(d):
                print(f"{p} (document {i + 1}): {e}")
                bad += 1
        if not docs:
            print(f"{p}: no YAML document")
            bad += 1
    if bad == 0:
        print(f"check-mpijob: {', '.join(argv)}: ok (MPIJob v2beta1)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
