"""deploy/kubernetes against the fleet controller's Kubernetes provider
(orchestrator/fleet/kubernetes.py): every pool the controller sizes, those of the spec the
production overlay ships and the default pools of every overlay, has the Deployment
``deployment_name(pool)`` names, whose pods carry the pool label the provider drains by and run
a worker of the pool's model and capacity type, on the node pool that capacity type belongs on;
the controller's service account may scale those Deployments and mark their pods, nothing more;
and the provider itself, asked about each pool, finds its Deployment."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cli.main import build_parser
from leasehold.settings import Settings
from orchestrator.fleet.kubernetes import GONE_WITHIN_SECONDS, POOL_LABEL, deployment_name
from orchestrator.fleet.runner import load_spec
from tests.deploy.manifests import (
    OVERLAYS,
    app_containers,
    component,
    config,
    container_env,
    deployment,
    gpu_deployments,
    of_kind,
    pod_spec,
    rendered,
    workloads,
)
from worker_gpu.main import capacity_type
from workflows.fleet.types import FleetPool, FleetSpec
from workflows.queues import CAPACITY_TYPES

CONTROLLER = "fleet"
# The preemptible GPU node pool's taint (overlays/production/worker-gpu.yaml, docs/deploy.md).
PREEMPTIBLE_TAINT = {"key": "leasehold.dev/preemptible", "value": "true", "effect": "NoSchedule"}
# The RBAC rules the provider's calls need: read and patch a Deployment's scale; list, read and
# annotate pods.
SCALE_VERBS = {"get", "patch"}
POD_VERBS = {"get", "list", "patch"}
CONTROLLER_OBJECTS = {
    ("Deployment", CONTROLLER),
    ("ServiceAccount", CONTROLLER),
    ("Role", CONTROLLER),
    ("RoleBinding", CONTROLLER),
    ("ConfigMap", "leasehold-fleet"),
}


def _controller_args(overlay: str) -> Any:
    container = pod_spec(deployment(overlay, CONTROLLER))["containers"][0]
    return build_parser().parse_args(container["args"])


def shipped_spec(overlay: str, tmp_path: Path) -> FleetSpec:
    """The spec the overlay's controller reads: the ConfigMap file mounted where its --config
    points, loaded by the controller's own loader."""
    spec = pod_spec(deployment(overlay, CONTROLLER))
    path = Path(_controller_args(overlay).config)
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    text = of_kind(overlay, "ConfigMap")[volume["configMap"]["name"]]["data"][path.name]
    copy = tmp_path / path.name
    copy.write_text(text)
    return load_spec(copy)


def default_pools(overlay: str) -> list[FleetPool]:
    """A pool per model version the overlay serves and capacity type: what a spec with no GPU
    classes can name."""
    models = config(overlay)["LEASEHOLD_MODELS"].split(",")
    return [FleetPool(model=model, capacity_type=kind) for model in models for kind in CAPACITY_TYPES]


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' rule: same key (or none, with Exists), same effect (or none), and Exists or
    the same value."""
    for toleration in tolerations:
        if toleration.get("key", taint["key"]) != taint["key"]:
            continue
        if toleration.get("effect", taint["effect"]) != taint["effect"]:
            continue
        if toleration.get("operator", "Equal") == "Exists" or toleration.get("value") == taint["value"]:
            return True
    return False


def test_the_toleration_rule_is_kubernetes() -> None:
    assert _tolerates([PREEMPTIBLE_TAINT | {"operator": "Equal"}], PREEMPTIBLE_TAINT)
    assert _tolerates([{"operator": "Exists"}], PREEMPTIBLE_TAINT)
    assert not _tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], PREEMPTIBLE_TAINT)
    assert not _tolerates([{"key": PREEMPTIBLE_TAINT["key"], "value": "false"}], PREEMPTIBLE_TAINT)


def assert_pool_deployment(overlay: str, pool: FleetPool) -> None:
    """The Deployment the provider scales for ``pool`` is there, and runs that pool's workers."""
    name = deployment_name(pool)
    docs = gpu_deployments(overlay)
    assert name in docs, f"{overlay}: no Deployment {name} for pool {pool.key} (the provider raises DeploymentMissing)"
    doc = docs[name]
    # The provider lists the pods to drain by this label; the selector keeps the pools apart.
    assert doc["spec"]["template"]["metadata"]["labels"][POOL_LABEL] == name
    assert doc["spec"]["selector"]["matchLabels"][POOL_LABEL] == name
    spec = pod_spec(doc)
    container = spec["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.kind, args.model) == ("worker", "gpu", pool.model), name
    # The worker's own start-up check, with the deployment's settings and the declared type.
    env = container_env(overlay, container)
    settings = Settings(
        video_capacity_types=env.get("LEASEHOLD_VIDEO_CAPACITY_TYPES", "false"),
        gpu_capacity_type=args.capacity_type,
        gpu_model=args.model,
    )
    assert capacity_type(settings) == pool.capacity_type, name
    # A retired pod checkpoints and hands its job back before the provider stops waiting for it.
    assert spec["terminationGracePeriodSeconds"] >= GONE_WITHIN_SECONDS, name
    tolerations = spec.get("tolerations", [])
    assert _tolerates(tolerations, PREEMPTIBLE_TAINT) is (pool.capacity_type == "preemptible" and bool(tolerations))
    if tolerations:  # scheduled onto GPU node pools (production): each type on its own
        pool_label = spec["nodeSelector"]["leasehold.dev/node-pool"]
        assert pool_label == ("gpu-preemptible" if pool.capacity_type == "preemptible" else "gpu"), name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_default_pool_has_its_deployment(overlay: str) -> None:
    pools = default_pools(overlay)
    for pool in pools:
        assert_pool_deployment(overlay, pool)
    # And no GPU Deployment the controller could not name.
    assert set(gpu_deployments(overlay)) == {deployment_name(pool) for pool in pools}
    # Every process splits the queues as the workers do (the API routes jobs by it).
    for doc, container in app_containers(overlay):
        if "command" not in container:
            flag = container_env(overlay, container).get("LEASEHOLD_VIDEO_CAPACITY_TYPES")
            assert Settings(video_capacity_types=flag or "false").video_capacity_types, doc["metadata"]["name"]


def test_a_pool_without_its_deployment_is_caught() -> None:
    large = FleetPool(model="procedural-v1", gpu_class="large", capacity_type="reserved")
    with pytest.raises(AssertionError, match="DeploymentMissing"):
        assert_pool_deployment("production", large)


def test_the_shipped_spec_names_pools_with_deployments(tmp_path: Path) -> None:
    spec = shipped_spec("production", tmp_path)
    assert {pool.capacity_type for pool in spec.pools} == set(CAPACITY_TYPES)
    for pool in spec.pools:
        assert_pool_deployment("production", pool)
        # Where the controller starts from is within what it may keep.
        replicas = deployment("production", deployment_name(pool))["spec"]["replicas"]
        assert pool.min_workers <= replicas <= pool.max_workers, pool.key


def test_the_controller_may_scale_its_pools_and_nothing_more(tmp_path: Path) -> None:
    spec = shipped_spec("production", tmp_path)
    controller = deployment("production", CONTROLLER)
    namespace = controller["metadata"]["namespace"]
    pod = pod_spec(controller)
    args = _controller_args("production")
    assert args.provider == "kubernetes"
    # --namespace is the pod's own, where the pools' Deployments are.
    env = {item["name"]: item for item in pod["containers"][0]["env"]}
    assert args.namespace.startswith("$(") and args.namespace.endswith(")")
    field = env[args.namespace[2:-1]]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.namespace"
    assert {gpu["metadata"]["namespace"] for gpu in gpu_deployments("production").values()} == {namespace}
    # Its service account, bound to its Role in that namespace.
    account = pod["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True
    assert account in of_kind("production", "ServiceAccount")
    bindings = [
        b
        for b in of_kind("production", "RoleBinding").values()
        if {"kind": "ServiceAccount", "name": account, "namespace": namespace} in b["subjects"]
    ]
    assert [b["roleRef"]["kind"] for b in bindings] == ["Role"]
    role = of_kind("production", "Role")[bindings[0]["roleRef"]["name"]]
    assert role["metadata"]["namespace"] == namespace
    grants = {
        (group, resource): (set(rule["verbs"]), set(rule.get("resourceNames", [])))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    pools = {deployment_name(pool) for pool in spec.pools}
    assert grants == {("apps", "deployments/scale"): (SCALE_VERBS, pools), ("", "pods"): (POD_VERBS, set())}
    assert not of_kind("production", "ClusterRoleBinding")
    # No other pod holds a token for the Kubernetes API.
    for doc in workloads("production"):
        if component(doc) != CONTROLLER:
            assert pod_spec(doc).get("automountServiceAccountToken") is False, doc["metadata"]["name"]


def test_under_keda_the_controller_is_gone_and_each_pool_is_scaled_once() -> None:
    present = {(doc["kind"], doc["metadata"]["name"]) for doc in rendered("production-keda")}
    assert not CONTROLLER_OBJECTS & present
    assert CONTROLLER_OBJECTS <= {(doc["kind"], doc["metadata"]["name"]) for doc in rendered("production")}
    targets = [doc["spec"]["scaleTargetRef"]["name"] for doc in of_kind("production-keda", "ScaledObject").values()]
    assert sorted(name for name in targets if name in gpu_deployments("production-keda")) == sorted(
        deployment_name(pool) for pool in default_pools("production-keda")
    )
    for name in gpu_deployments("production-keda"):
        assert "replicas" not in deployment("production-keda", name)["spec"], name


def test_the_provider_finds_every_shipped_pool(tmp_path: Path) -> None:
    """The provider's own reads, against the rendered Deployments' replica counts."""
    pytest.importorskip("kubernetes")
    from kubernetes import client

    from orchestrator.fleet.kubernetes import DeploymentMissing, KubernetesProvider

    namespace = deployment("production", CONTROLLER)["metadata"]["namespace"]
    replicas = {name: doc["spec"]["replicas"] for name, doc in gpu_deployments("production").items()}

    class RenderedDeployments:
        def read_namespaced_deployment_scale(self, name: str, ns: str) -> Any:
            if ns != namespace or name not in replicas:
                raise client.ApiException(status=404, reason="Not Found")
            return SimpleNamespace(spec=SimpleNamespace(replicas=replicas[name]))

    provider = KubernetesProvider(client.ApiClient(), namespace)
    provider.apps = RenderedDeployments()
    for pool in shipped_spec("production", tmp_path).pools:
        assert provider.running(pool) == replicas[deployment_name(pool)]
    with pytest.raises(DeploymentMissing):
        provider.running(FleetPool(model="other-v1", capacity_type="reserved"))
