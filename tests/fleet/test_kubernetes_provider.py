"""``KubernetesProvider`` with the official client against a tiny fake API server over real
HTTP on loopback: it scales the pool's Deployment, and drains the pods it chose (idle first,
by the deletion-cost annotation the ReplicaSet honours) before they go.

Skipped where the ``kubernetes`` package (the ``fleet`` extra) is not installed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

kubernetes = pytest.importorskip("kubernetes")

from orchestrator.fleet.kubernetes import (  # noqa: E402
    DELETION_COST,
    POOL_LABEL,
    DeploymentMissing,
    KubernetesProvider,
    deployment_name,
)
from workflows.fleet.types import FleetPool  # noqa: E402

POOL = FleetPool(model="wan2.1-t2v-1.3b", gpu_class="small", capacity_type="preemptible", max_workers=4)
NAME = deployment_name(POOL)


@dataclass
class FakeCluster:
    """One namespace's Deployments (replicas) and their pods, as a ReplicaSet would keep them."""

    replicas: dict[str, int] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    serial: int = 0

    def scale_to(self, deployment: str, replicas: int) -> None:
        mine = [p for p in self.pods.values() if p["labels"][POOL_LABEL] == deployment]
        while len(mine) < replicas:
            self.serial += 1
            pod: dict[str, Any] = {"name": f"{deployment}-{self.serial}", "labels": {POOL_LABEL: deployment}}
            pod["annotations"] = {}
            pod["created"] = f"2026-12-06T00:00:{self.serial:02d}Z"
            self.pods[pod["name"]] = pod
            mine.append(pod)
        # The ReplicaSet deletes the lowest pod-deletion-cost first, then the youngest.
        mine.sort(key=lambda p: (int(p["annotations"].get(DELETION_COST, "0")), -int(p["created"][-3:-1])))
        for pod in mine[: max(0, len(mine) - replicas)]:
            del self.pods[pod["name"]]
        self.replicas[deployment] = replicas


def _pod(pod: dict[str, Any]) -> dict[str, Any]:
    meta = {
        "name": pod["name"],
        "namespace": "gpu",
        "labels": pod["labels"],
        "annotations": pod["annotations"],
        "creationTimestamp": pod["created"],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def handler_for(cluster: FakeCluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self) -> None:
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            body = {}
            if method == "PATCH":
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            cluster.requests.append((method, url.path, self.headers.get("Content-Type", "")))
            if parts[:4] == ["apis", "apps", "v1", "namespaces"] and parts[5:] and parts[7:] == ["scale"]:
                name = parts[6]
                if name not in cluster.replicas:
                    return self._not_found()
                if method == "PATCH":
                    cluster.scale_to(name, body["spec"]["replicas"])
                scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name}}
                return self._send(200, {**scale, "spec": {"replicas": cluster.replicas[name]}})
            if parts[:3] == ["api", "v1", "namespaces"] and parts[4:5] == ["pods"]:
                if len(parts) == 5:
                    selector = parse_qs(url.query)["labelSelector"][0]
                    key, value = selector.split("=")
                    items = [_pod(p) for p in cluster.pods.values() if p["labels"].get(key) == value]
                    return self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
                pod = cluster.pods.get(parts[5])
                if pod is None:
                    return self._not_found()
                if method == "PATCH":
                    pod["annotations"].update(body["metadata"]["annotations"])
                return self._send(200, _pod(pod))
            return self._not_found()

        def do_GET(self) -> None:
            self._route("GET")

        def do_PATCH(self) -> None:
            self._route("PATCH")

    return Handler


@pytest.fixture
def cluster() -> Iterator[tuple[FakeCluster, KubernetesProvider]]:
    state = FakeCluster()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = kubernetes.client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state, KubernetesProvider(kubernetes.client.ApiClient(config), namespace="gpu")
    finally:
        server.shutdown()
        server.server_close()


def test_scales_the_pools_deployment_and_drains_the_idle_pod_first(
    cluster: tuple[FakeCluster, KubernetesProvider],
) -> None:
    state, provider = cluster
    assert NAME == "leasehold-gpu-wan2-1-t2v-1-3b-small-preemptible"
    state.replicas[NAME] = 0
    assert provider.running(POOL) == 0
    assert provider.start(POOL, 3) == 3
    assert provider.running(POOL) == 3 and len(state.pods) == 3
    oldest = sorted(state.pods)[0]
    # The oldest pod is idle (its poller's identity names its host): it goes, not the youngest
    # the ReplicaSet would pick by itself.
    idle = [f"leasehold-gpu-small-preemptible-7@{oldest}"]
    retired = provider.retire(POOL, 1, idle, lambda: None)
    assert retired == [f"{POOL.key}/{oldest}"]
    assert oldest not in state.pods and provider.running(POOL) == 2
    patches = [(path, kind) for method, path, kind in state.requests if method == "PATCH"]
    assert (f"/api/v1/namespaces/gpu/pods/{oldest}", "application/merge-patch+json") in patches
    # With no idle pod, the youngest goes.
    youngest = max(state.pods, key=lambda n: state.pods[n]["created"])
    assert provider.retire(POOL, 1, [], lambda: None) == [f"{POOL.key}/{youngest}"]
    assert list(state.replicas.values()) == [1]


def test_a_pool_without_its_deployment_is_a_clear_error(cluster: tuple[FakeCluster, KubernetesProvider]) -> None:
    _state, provider = cluster
    with pytest.raises(DeploymentMissing, match=f"no Deployment gpu/{NAME} for pool"):
        provider.running(POOL)
