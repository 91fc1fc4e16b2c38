"""deploy/kubernetes against the processes' own behaviour: GPU scheduling and the grace a
checkpoint needs, probes on the routes and ports the processes really serve (real HTTP), KEDA
triggers on the queues the workers really poll, and Temporal set up as the code expects."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI
from starlette.routing import Match

from api.app import create_app
from cli.main import build_parser
from leasehold.devserver import DYNAMIC_CONFIG, dev_server_command
from leasehold.health_server import serve_health
from leasehold.settings import Settings
from testing.harness import REPO_ROOT
from tests.deploy.manifests import (
    KUBERNETES_DIR,
    OVERLAYS,
    config,
    container_env,
    deployment,
    gpu_deployments,
    of_kind,
    pod_spec,
)
from workflows.queues import (
    CAPACITY_TYPES,
    GPU_GRACEFUL_SHUTDOWN,
    GPU_MAX_HEARTBEAT_THROTTLE,
    ci_queue,
    orchestration_queue,
    video_queue,
)
from workflows.search_attributes import ALL

# Beyond the worker's own graceful shutdown: the checkpoint's upload finishing, the worker
# closing its connection and exiting.
EXIT_MARGIN_SECONDS = 15
GPU_FLEET = 2400
KEDA_TEMPORAL_FIELDS = {
    "endpoint",
    "endpointFromEnv",
    "namespace",
    "taskQueue",
    "queueTypes",
    "targetQueueSize",
    "activationTargetQueueSize",
    "workerDeploymentName",
    "workerDeploymentBuildId",
    "minConnectTimeout",
    "unsafeSsl",
    "tlsServerName",
}


def _container(overlay: str, name: str) -> dict[str, Any]:
    return pod_spec(deployment(overlay, name))["containers"][0]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gpu_grace_period_covers_the_checkpoint_at_notice(overlay: str) -> None:
    assert gpu_deployments(overlay)
    for name, doc in gpu_deployments(overlay).items():
        spec = pod_spec(doc)
        grace = spec["terminationGracePeriodSeconds"]
        assert grace >= GPU_GRACEFUL_SHUTDOWN.total_seconds() + EXIT_MARGIN_SECONDS, name
        env = container_env(overlay, spec["containers"][0])
        default = Settings.model_fields["checkpoint_interval_seconds"].default
        interval = float(env.get("LEASEHOLD_CHECKPOINT_INTERVAL_SECONDS", default))
        # A notice that arrives just before a periodic checkpoint still has its own time.
        assert grace >= interval + EXIT_MARGIN_SECONDS, name
        # SIGTERM reaches the worker itself: the image's entrypoint is `leasehold`, not a shell.
        assert "command" not in spec["containers"][0], name


def _capacity_type(doc: dict[str, Any]) -> str:
    return build_parser().parse_args(pod_spec(doc)["containers"][0]["args"]).capacity_type


def test_production_gpu_workers_get_a_gpu_on_their_pool() -> None:
    """Preemptible workers on the tainted preemptible pool, reserved ones on the regular GPU
    nodes (and not tolerating the preemptible taint, so a reclaim never takes them)."""
    types = set()
    for name, doc in gpu_deployments("production").items():
        spec = pod_spec(doc)
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        taints = {(t["key"], t.get("effect")) for t in spec["tolerations"]}
        assert ("nvidia.com/gpu", "NoSchedule") in taints
        capacity_type = _capacity_type(doc)
        types.add(capacity_type)
        preemptible = capacity_type == "preemptible"
        assert spec["nodeSelector"] == {"leasehold.dev/node-pool": "gpu-preemptible" if preemptible else "gpu"}, name
        assert (("leasehold.dev/preemptible", "NoSchedule") in taints) is preemptible, name
    assert types == {"reserved", "preemptible"}
    ci = pod_spec(deployment("production", "worker-ci"))
    assert ci["nodeSelector"] == {"leasehold.dev/node-pool": "ci"}
    # Nothing else tolerates the GPU or CI taints.
    for name in ("api", "orchestration", "fleet"):
        assert "tolerations" not in pod_spec(deployment("production", name))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_gpu_worker_asks_for_a_gpu_only_with_its_scheduling(overlay: str) -> None:
    for name, doc in gpu_deployments(overlay).items():
        spec = pod_spec(doc)
        wants_gpu = "nvidia.com/gpu" in spec["containers"][0]["resources"].get("limits", {})
        assert wants_gpu == ("nodeSelector" in spec) == ("tolerations" in spec), name
        assert wants_gpu == overlay.startswith("production"), name


def _serves_get(app: FastAPI, path: str) -> bool:
    """Whether one of the app's routes takes a GET of ``path`` (routing only: no request runs)."""
    scope = {"type": "http", "path": path, "method": "GET", "root_path": "", "headers": [], "query_string": b""}
    return any(route.matches(scope)[0] == Match.FULL for route in app.routes)


def test_api_probes_name_routes_of_the_app(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    assert not _serves_get(app, "/nonexistent")
    for overlay in OVERLAYS:
        container = _container(overlay, "api")
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        args = build_parser().parse_args(container["args"])
        assert ports["http"] == args.port and args.host == "0.0.0.0"
        probes = [container[key] for key in ("startupProbe", "livenessProbe", "readinessProbe")]
        http = [probe["httpGet"] for probe in probes if "httpGet" in probe]
        assert http, "the API's readiness is its /healthz"
        for probe in http:
            assert _serves_get(app, probe["path"]) and ports[probe["port"]] == args.port
        for probe in probes:
            port = (probe.get("httpGet") or probe.get("tcpSocket"))["port"]
            assert ports.get(port, port) == args.port


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def health() -> Any:
    """A worker's real health server on a free port, its readiness switchable."""
    state = {"ready": False}
    server = serve_health("127.0.0.1", 0, lambda: state["ready"])
    yield server.server_address[1], state
    server.shutdown()


def _http_probed(overlay: str) -> list[str]:
    """The workers probed over HTTP on their health server (run_worker's): orchestration, every
    GPU pool, and the fleet controller where the overlay runs it."""
    names = ["orchestration", *gpu_deployments(overlay)]
    return names + [name for name in ("fleet",) if name in of_kind(overlay, "Deployment")]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_http_probes_hit_the_health_server(overlay: str, health: Any) -> None:
    port, state = health
    for name in _http_probed(overlay):
        container = _container(overlay, name)
        env = container_env(overlay, container)
        # httpGet comes from the kubelet, off the pod's loopback: the server must bind all addresses.
        assert env["LEASEHOLD_METRICS_HOST"] == "0.0.0.0", name
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for key in ("startupProbe", "livenessProbe"):
            probe = container[key]["httpGet"]
            assert ports[probe["port"]] == int(env["LEASEHOLD_METRICS_PORT"]), name
            assert _get(f"http://127.0.0.1:{port}{probe['path']}") == 503  # starting: not polling yet
            state["ready"] = True
            assert _get(f"http://127.0.0.1:{port}{probe['path']}") == 200
            state["ready"] = False
    assert _get(f"http://127.0.0.1:{port}/nonexistent") == 404


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ci_worker_exec_probe_runs_against_the_health_server(overlay: str, health: Any) -> None:
    """The CI worker's health server listens on loopback only (worker_ci/main.py), so its probe
    runs inside the container; run the probe's own command against a real server."""
    port, state = health
    container = _container(overlay, "worker-ci")
    metrics_port = container_env(overlay, container)["LEASEHOLD_METRICS_PORT"]
    for key in ("startupProbe", "livenessProbe"):
        command = container[key]["exec"]["command"]
        assert command[:2] == ["python", "-c"]
        assert f"'http://127.0.0.1:{metrics_port}/healthz'" in command[2]
        script = command[2].replace(f":{metrics_port}/", f":{port}/")
        run = [sys.executable, "-c", script]
        assert subprocess.run(run, capture_output=True, timeout=30).returncode != 0
        state["ready"] = True
        assert subprocess.run(run, capture_output=True, timeout=30).returncode == 0
        state["ready"] = False


def test_keda_triggers_name_the_queues_their_workers_poll() -> None:
    scaled = of_kind("production-keda", "ScaledObject")
    # One per GPU pool, named as its Deployment, and the CI workers'.
    assert set(scaled) == {*gpu_deployments("production-keda"), "worker-ci"}
    gpu_max = 0
    cfg = config("production-keda")
    prefix = cfg.get("LEASEHOLD_QUEUE_PREFIX", "")
    for name, doc in scaled.items():
        assert doc["apiVersion"] == "keda.sh/v1alpha1"
        spec = doc["spec"]
        target = deployment("production-keda", spec["scaleTargetRef"]["name"])
        # The HPA owns the count: one in the Deployment would reset the pool at every apply.
        assert "replicas" not in target["spec"], name
        args = build_parser().parse_args(pod_spec(target)["containers"][0]["args"])
        if args.kind == "gpu":
            assert spec["scaleTargetRef"]["name"] == name
            queue = video_queue(args.model, prefix, capacity_type=args.capacity_type)
            # Never to zero: with no worker the API refuses free jobs, so no backlog would form.
            assert spec["minReplicaCount"] >= 1
            gpu_max += spec["maxReplicaCount"]
        else:
            queue = ci_queue(args.labels.split(","), prefix)
            assert spec["minReplicaCount"] >= 1
        (trigger,) = spec["triggers"]
        meta = trigger["metadata"]
        assert trigger["type"] == "temporal" and set(meta) <= KEDA_TEMPORAL_FIELDS, name
        assert meta["taskQueue"] == queue and meta["queueTypes"] == "activity"
        assert meta["endpoint"] == cfg["LEASEHOLD_TEMPORAL_ADDRESS"]
        assert meta["namespace"] == cfg["LEASEHOLD_TEMPORAL_NAMESPACE"]
        assert all(isinstance(value, str) for value in meta.values())  # KEDA's metadata is strings
        assert int(meta["targetQueueSize"]) >= 1
        scale_down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        assert scale_down["stabilizationWindowSeconds"] >= 600
    assert gpu_max == GPU_FLEET


def test_the_ci_target_is_the_slots_of_one_worker() -> None:
    container = _container("production-keda", "worker-ci")
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    defaults = Settings.model_fields
    usable = int(int(limit[:-2]) * 2**30 * defaults["ci_memory_share"].default)
    slots = usable // defaults["ci_job_memory_bytes"].default
    meta = of_kind("production-keda", "ScaledObject")["worker-ci"]["spec"]["triggers"][0]["metadata"]
    assert int(meta["targetQueueSize"]) == slots


def test_embedded_temporal_is_the_dev_server_leasehold_up_runs() -> None:
    container = _container("embedded", "temporal")
    command = container["command"]
    value = {flag: command[i + 1] for i, flag in enumerate(command) if flag in ("--db-filename", "--port", "--ui-port")}
    expected = dev_server_command(
        "temporal", Path(value["--db-filename"]), int(value["--port"]), int(value["--ui-port"]), ALL, ip="0.0.0.0"
    )
    assert command == expected
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(value["--db-filename"]).parent) in mounts
    # Never two servers on one SQLite file.
    assert deployment("embedded", "temporal")["spec"]["strategy"]["type"] == "Recreate"


def _search_attribute_specs(text: str) -> list[str]:
    return text.split()


def test_production_temporal_init_runs_the_compose_script() -> None:
    script = of_kind("production", "ConfigMap")["temporal-init-script"]["data"]["init-namespace.sh"]
    assert script == (REPO_ROOT / "deploy" / "temporal" / "init-namespace.sh").read_text()
    job = of_kind("production", "Job")["temporal-init"]
    container = pod_spec(job)["containers"][0]
    env = {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}
    expected = [f"{key.name}={key.indexed_value_type.name.title()}" for key in ALL]
    assert _search_attribute_specs(env["SEARCH_ATTRIBUTES"]) == expected
    assert env["TEMPORAL_ADDRESS"]["configMapKeyRef"]["key"] == "LEASEHOLD_TEMPORAL_ADDRESS"
    assert container["command"] == ["/bin/sh", "/scripts/init-namespace.sh"]


def _walk(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [item for key, sub in value.items() for item in _walk(sub, f"{path}.{key}")]
    if isinstance(value, list):
        return [item for i, sub in enumerate(value) for item in _walk(sub, f"{path}[{i}]")]
    return [(path, value)]


def test_helm_values_for_temporal() -> None:
    values = yaml.safe_load((KUBERNETES_DIR / "temporal" / "values.yaml").read_text())
    server = values["server"]
    shards = server["config"]["numHistoryShards"]
    assert shards >= 512 and shards & (shards - 1) == 0
    for path, _ in _walk(values):
        assert not path.lower().endswith("password"), f"{path} holds a password: use existingSecret"
    for store in ("default", "visibility"):
        assert server["config"]["persistence"][store]["sql"]["existingSecret"] == "temporal-postgres"
    dynamic = server["dynamicConfig"]
    compose = yaml.safe_load((REPO_ROOT / "deploy" / "temporal" / "dynamicconfig" / "leasehold.yaml").read_text())
    assert dynamic["matching.enableFairness"] == compose["matching.enableFairness"]
    assert "matching.enableFairness=true" in DYNAMIC_CONFIG
    # Partition settings name real queues: the orchestration queue and each production model's.
    models = config("production")["LEASEHOLD_MODELS"].split(",")
    assert Settings(video_capacity_types=config("production")["LEASEHOLD_VIDEO_CAPACITY_TYPES"]).video_capacity_types
    real = {orchestration_queue()} | {video_queue(m, capacity_type=t) for m in models for t in CAPACITY_TYPES}
    for key in ("matching.numTaskqueueReadPartitions", "matching.numTaskqueueWritePartitions"):
        assert {entry["constraints"]["taskQueueName"] for entry in dynamic[key]} == real
    assert dynamic["matching.numTaskqueueReadPartitions"] == dynamic["matching.numTaskqueueWritePartitions"]
    # The frontends admit the heartbeats of a full GPU fleet with room for the rest.
    heartbeats = GPU_FLEET / GPU_MAX_HEARTBEAT_THROTTLE.total_seconds()
    assert dynamic["frontend.namespaceRPS"][0]["value"] * server["replicaCount"] >= 2 * heartbeats
    # And the long polls of an idle fleet, one frontend taking more than its share.
    assert dynamic["frontend.namespaceCount"][0]["value"] >= GPU_FLEET
    # The dev server's poll rate is for one shard: it is not carried over.
    assert "history.transferProcessorMaxPollRPS" not in dynamic
