"""A generated cluster for the benchmarks: realistic nodes (a GPU and a CPU fleet,
three zones, team pools, a few in maintenance) and pods placed on them."""

from __future__ import annotations

import copy
import json
import random
import zlib
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
TEAMS = ["ml-training", "vision", "search", "ads"]


def sample_node() -> dict[str, Any]:
    node: dict[str, Any] = json.loads((DATA / "node.json").read_text())
    return node


def sample_pod() -> dict[str, Any]:
    pod: dict[str, Any] = json.loads((DATA / "pod.json").read_text())
    return pod


def nodes(count: int, *, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    base = sample_node()
    out = []
    for i in range(count):
        node = copy.deepcopy(base)
        gpu = i % 4 == 0
        zone = ZONES[i % len(ZONES)]
        name = f"{'gpu' if gpu else 'cpu'}-{zone}-{i:05d}"
        meta = node["metadata"]
        meta["name"] = name
        meta["uid"] = f"uid-node-{i}"
        labels = meta["labels"]
        labels["kubernetes.io/hostname"] = name
        labels["topology.kubernetes.io/zone"] = zone
        labels["topology.kubernetes.io/region"] = "us-east-1"
        labels["node.kubernetes.io/instance-type"] = "p5.48xlarge" if gpu else "m6i.8xlarge"
        if rng.random() < 0.3:
            labels["node.kpe.dev/team"] = rng.choice(TEAMS)
        else:
            labels.pop("node.kpe.dev/team", None)
        if rng.random() < 0.02:
            labels["kpe.dev/maintenance"] = "true"
        alloc = node["status"]["allocatable"]
        if gpu:
            alloc["nvidia.com/gpu"] = str(rng.choice([4, 8]))
        else:
            alloc.pop("nvidia.com/gpu", None)
            node["spec"]["taints"] = [t for t in node["spec"].get("taints", []) if t.get("key") != "nvidia.com/gpu"]
            for key in list(labels):
                if key.startswith("nvidia.com/"):
                    del labels[key]
        out.append(node)
    return out


def pods_on(nodes_: list[dict[str, Any]], per_node: int = 3, *, seed: int = 11) -> list[dict[str, Any]]:
    """Running pods: a few CPU services per node, and one GPU each on some GPU nodes."""
    rng = random.Random(seed)
    out = []
    for n, node in enumerate(nodes_):
        gpu_node = "nvidia.com/gpu" in node["status"]["allocatable"]
        for k in range(per_node):
            requests = {"cpu": rng.choice(["500m", "2", "4"]), "memory": rng.choice(["1Gi", "8Gi", "16Gi"])}
            if gpu_node and k == 0 and rng.random() < 0.5:
                requests["nvidia.com/gpu"] = str(rng.choice([1, 2, 4]))
            out.append(
                {
                    "metadata": {"name": f"p-{n}-{k}", "namespace": "apps", "uid": f"uid-pod-{n}-{k}", "labels": {"team": rng.choice(TEAMS)}},
                    "spec": {"nodeName": node["metadata"]["name"], "containers": [{"name": "main", "resources": {"requests": requests}}]},
                    "status": {"phase": "Running"},
                }
            )
    return out


def scheduling_pod(*, gpus: int = 1) -> dict[str, Any]:
    """The pod the benchmarks schedule: the sample training pod, asking for ``gpus`` GPUs."""
    pod = sample_pod()
    pod["metadata"]["namespace"] = "ml-train"
    pod["metadata"]["labels"].update({"team": "vision", "kpe.dev/zone": "us-east-1a", "kpe.dev/workload": "training"})
    for c in pod["spec"]["containers"]:
        for section in ("requests", "limits"):
            if "nvidia.com/gpu" in c["resources"].get(section, {}):
                c["resources"][section]["nvidia.com/gpu"] = str(gpus)
    return pod


# --- pods as a real API server returns them ------------------------------------

_APPS = ["checkout", "cart", "search-api", "recommender", "ads-serving", "feature-store", "ingest", "thumbnailer",
         "auth", "billing", "notifier", "inventory", "pricing", "reviews", "geo", "catalog"]


def _fields(keys: list[str]) -> dict[str, Any]:
    return {f"f:{k}": {} for k in keys}


def _container_fields(name: str) -> dict[str, Any]:
    return {
        f'k:{{"name":"{name}"}}': {
            ".": {}, **_fields(["image", "imagePullPolicy", "name", "terminationMessagePath", "terminationMessagePolicy"]),
            "f:env": {".": {}, **{f'k:{{"name":"{e}"}}': {".": {}, "f:name": {}, "f:value": {}} for e in ("LOG_LEVEL", "PORT")}},
            "f:livenessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}}, "f:periodSeconds": {}},
            "f:ports": {".": {}, 'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
            "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
            "f:volumeMounts": {".": {}, 'k:{"mountPath":"/etc/app"}': {".": {}, "f:mountPath": {}, "f:name": {}, "f:readOnly": {}}},
        }
    }


def realistic_pod(i: int, node: str, *, seed: int = 13) -> dict[str, Any]:
    """A running Deployment replica shaped as a real API server (1.30+) returns it from a list or
    watch: managedFields of kube-controller-manager and kubelet, status with conditions and
    containerStatuses, the projected service-account token volume, env, probes, ownerReferences.
    About 4 KiB of JSON. Deterministic in ``i`` and ``seed``; replicas of the same app share
    images, labels and the pod template hash, as they do in a cluster."""
    rng = random.Random(seed * 1_000_003 + i)
    app = _APPS[i % len(_APPS)]
    team = TEAMS[i % len(TEAMS)]
    namespace = f"{team}-prod"
    template_hash = f"{zlib.crc32(f'{app}/{seed}'.encode()):08x}"[:10]
    suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    name = f"{app}-{template_hash}-{suffix}"
    uid = "%08x-%04x-%04x-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(16), rng.getrandbits(16), rng.getrandbits(48))
    created = f"2026-11-{1 + i % 20:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z"
    started = created
    token = "kube-api-access-" + "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    image = f"registry.example.com/{team}/{app}:1.{i % 16 % 7}.{i % 16 % 3}"
    pod_ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    host_ip = f"172.20.{rng.randrange(256)}.{rng.randrange(256)}"
    cpu, memory = rng.choice([("100m", "128Mi"), ("250m", "256Mi"), ("500m", "512Mi"), ("1", "1Gi"), ("2", "4Gi")])
    condition_types = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": f"{app}-{template_hash}-",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": created,
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": team, "pod-template-hash": template_hash, "team": team},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-01T09:00:00Z", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{template_hash}", "uid": f"6f1c2d3e-0000-4000-8000-{i % 16:012x}",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
                 "fieldsV1": {
                     "f:metadata": {"f:annotations": {".": {}, **_fields(["kubectl.kubernetes.io/restartedAt", "prometheus.io/port", "prometheus.io/scrape"])},
                                    "f:generateName": {}, "f:labels": {".": {}, **_fields(["app.kubernetes.io/name", "app.kubernetes.io/part-of", "pod-template-hash", "team"])},
                                    "f:ownerReferences": {".": {}, f'k:{{"uid":"6f1c2d3e-0000-4000-8000-{i % 16:012x}"}}': {}}},
                     "f:spec": {"f:containers": _container_fields(app),
                                **_fields(["dnsPolicy", "enableServiceLinks", "restartPolicy", "schedulerName", "securityContext", "serviceAccount",
                                           "serviceAccountName", "terminationGracePeriodSeconds"]),
                                "f:volumes": {".": {}, 'k:{"name":"config"}': {".": {}, "f:configMap": {".": {}, "f:defaultMode": {}, "f:name": {}}, "f:name": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": started, "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {
                     "f:conditions": {**{f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                                         for t in condition_types[:-1]}},
                     **_fields(["containerStatuses", "hostIP", "phase", "podIP", "startTime"]),
                     "f:hostIPs": {}, "f:podIPs": {".": {}, f'k:{{"ip":"{pod_ip}"}}': {".": {}, "f:ip": {}}}}}},
            ],
        },
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                {"name": token, "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ], "defaultMode": 420}},
            ],
            "containers": [{
                "name": app,
                "image": image,
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "resources": {"limits": {"memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
                "volumeMounts": [{"name": "config", "readOnly": True, "mountPath": "/etc/app"},
                                 {"name": token, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10,
                                  "successThreshold": 1, "failureThreshold": 3},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": app,
            "serviceAccount": app,
            "nodeName": node,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started} for t in condition_types],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": started,
            "containerStatuses": [{
                "name": app,
                "state": {"running": {"startedAt": started}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": image,
                "imageID": f"{image.split(':')[0]}@sha256:{zlib.crc32(f'{image}/{seed}'.encode()):08x}{'0' * 56}",
                "containerID": f"containerd://{rng.getrandbits(256):064x}",
                "started": True,
            }],
            "qosClass": "Burstable",
        },
    }


def realistic_pods(nodes_: list[dict[str, Any]], per_node: int, *, seed: int = 13) -> list[dict[str, Any]]:
    """``per_node`` realistic running pods (``realistic_pod``) on each of ``nodes_``."""
    names = [n["metadata"]["name"] for n in nodes_]
    return [realistic_pod(n * per_node + k, name, seed=seed) for n, name in enumerate(names) for k in range(per_node)]
