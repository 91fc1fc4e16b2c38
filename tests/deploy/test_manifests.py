"""deploy/kubernetes: every overlay renders, every object is valid for the pinned Kubernetes
releases, no secret ships, and what the manifests name (settings, commands, selectors, Secret
keys) is what the code and the other manifests have."""

from __future__ import annotations

import os
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cli.fleet import cmd_run as cmd_fleet_run
from cli.main import build_parser, cmd_api, cmd_worker
from leasehold.records.ci.secrets import Keyring, KeyringError
from leasehold.settings import Settings
from testing.harness import REPO_ROOT
from tests.deploy.manifests import (
    APP_IMAGES,
    KUBERNETES_DIR,
    KUBERNETES_VERSIONS,
    LEASEHOLD_NAME,
    OVERLAYS,
    SETTINGS_ENV,
    app_containers,
    component,
    config,
    container_env,
    deployment,
    image_name,
    manifest_files,
    of_kind,
    pod_spec,
    rendered,
    workloads,
)

DOCS = REPO_ROOT / "docs" / "deploy.md"
# Kinds without a schema in kubernetes-validate, checked by tests of their own.
CUSTOM_KINDS = {"ScaledObject"}
# Environment names whose values are credentials: never a literal in a manifest.
SENSITIVE = re.compile(r"PASSWORD|SECRET|TOKEN|DATABASE_URL|ACCESS_KEY|_KEYS$|SIGNING_KEY|API_KEY")
# The processes every overlay runs (by component: the GPU workers are one Deployment per pool),
# and the fleet controller, which production runs beside them.
PROCESSES = {"api", "orchestration", "worker-gpu", "worker-ci"}
CONTROLLER = "fleet"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_kubernetes(overlay: str, version: str) -> None:
    docs = rendered(overlay)
    assert PROCESSES <= {component(doc) for doc in docs if doc["kind"] == "Deployment"}
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        # Strict: a field the API does not have (a typo) is an error, not silently dropped.
        kubernetes_validate.validate(doc, version, strict=True)


def test_validation_catches_a_typo_and_a_wrong_type() -> None:
    api = deployment("production", "api")
    api["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(api, KUBERNETES_VERSIONS[0], strict=True)
    api = deployment("production", "api")
    api["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(api, KUBERNETES_VERSIONS[0], strict=True)


def test_only_known_kinds_skip_the_schema() -> None:
    for overlay in OVERLAYS:
        for doc in rendered(overlay):
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[0], strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                assert doc["kind"] in CUSTOM_KINDS, doc["kind"]


def test_no_secret_ships() -> None:
    for path in manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert doc.get("kind") != "Secret", f"{path} commits a Secret"
    for overlay in OVERLAYS:
        for doc in rendered(overlay):
            assert doc["kind"] != "Secret"
            if doc["kind"] == "ConfigMap":
                sensitive = [key for key in doc.get("data", {}) if SENSITIVE.search(key)]
                assert not sensitive, f"{doc['metadata']['name']} holds {sensitive}"
        for workload in workloads(overlay):
            for container in pod_spec(workload)["containers"]:
                for item in container.get("env", []):
                    if SENSITIVE.search(item["name"]) and not item["name"].endswith("_FILE"):
                        assert "secretKeyRef" in item.get("valueFrom", {}), (workload["metadata"]["name"], item)


def _secret_refs(overlay: str) -> list[tuple[str, str, dict[str, Any], str]]:
    """(workload, secret, reference, key) for every Secret a pod reads."""
    refs = []
    for workload in workloads(overlay):
        name = workload["metadata"]["name"]
        spec = pod_spec(workload)
        for container in spec["containers"]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.append((name, ref["name"], ref, ref["key"]))
        for volume in spec.get("volumes", []):
            secret = volume.get("secret")
            if secret:
                for item in secret.get("items", []):
                    refs.append((name, secret["secretName"], secret, item["key"]))
    return refs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_need_their_secrets_and_the_docs_say_which(overlay: str) -> None:
    docs = DOCS.read_text()
    refs = _secret_refs(overlay)
    assert {secret for _, secret, _, _ in refs} == {"leasehold-env", "leasehold-keys"}
    for workload, secret, ref, key in refs:
        # Optional only where the process runs without it: /metrics off without its token.
        assert ref.get("optional", False) is (key == "metrics-token"), (workload, secret, key)
        assert f"`{key}`" in docs, f"docs/deploy.md does not say how to create {secret}'s {key}"


def test_a_named_keyring_file_that_is_missing_refuses(tmp_path: Any) -> None:
    """The manifests name LEASEHOLD_SECRETS_KEYS_FILE: without the file a process stops there."""
    mounts = {
        (doc["metadata"]["name"], container_env("production", container).get("LEASEHOLD_SECRETS_KEYS_FILE"))
        for doc, container in app_containers("production")
    }
    named = {path for _, path in mounts if path}
    assert named == {"/run/leasehold-keys/keys"}
    settings = Settings(data_dir=tmp_path, secrets_keys_file=tmp_path / "missing")
    with pytest.raises(KeyringError, match="cannot be read"):
        Keyring.from_settings(settings)
    assert not (tmp_path / "secrets-key").exists()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_keyring_reaches_only_the_processes_that_open_it(overlay: str) -> None:
    """API and orchestration seal and open secrets; GPU and CI workers hold no keyring and
    (the GPU worker, on a preemptible node) no database URL."""
    for doc, container in app_containers(overlay):
        env = container_env(overlay, container)
        volumes = {v.get("secret", {}).get("secretName") for v in pod_spec(doc).get("volumes", [])}
        holds_keys = "leasehold-keys" in volumes or "LEASEHOLD_SECRETS_KEYS_FILE" in env
        assert holds_keys is (component(doc) in ("api", "orchestration")), doc["metadata"]["name"]
        if component(doc) == "worker-gpu":
            assert "LEASEHOLD_DATABASE_URL" not in env


def leasehold_names(overlay: str) -> set[str]:
    """Every LEASEHOLD_* name the overlay sets or refers to."""
    names: set[str] = set(config(overlay))
    for doc in workloads(overlay):
        for container in pod_spec(doc)["containers"]:
            names |= {item["name"] for item in container.get("env", [])}
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("configMapKeyRef")
                if ref:
                    names.add(ref["key"])
    return {name for name in names if name.startswith("LEASEHOLD_")}


def unknown_settings(names: set[str]) -> set[str]:
    return names - SETTINGS_ENV


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_leasehold_variable_is_a_setting(overlay: str) -> None:
    assert unknown_settings(leasehold_names(overlay)) == set()
    # And in the prose of the manifests and the Helm values (comments name settings too).
    for path in manifest_files():
        assert unknown_settings(set(LEASEHOLD_NAME.findall(path.read_text()))) == set(), path
    # The check is not vacuous: a misspelt name is caught.
    misspelt = {"LEASEHOLD_TEMPORAL_ADRESS", "LEASEHOLD_TEMPORAL_ADDRESS"}
    assert unknown_settings(misspelt) == {"LEASEHOLD_TEMPORAL_ADRESS"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_settings_parse(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each container's environment, with stand-ins for the Secrets' values, is valid Settings."""
    for doc, container in app_containers(overlay):
        if "command" in container:
            continue  # another program from the image (the dev server, the init Job's shell)
        env = container_env(overlay, container)
        for name in [n for n in os.environ if n.startswith("LEASEHOLD_")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            if name.startswith("LEASEHOLD_"):
                monkeypatch.setenv(name, value if isinstance(value, str) else "stand-in")
        settings = Settings()
        assert settings.temporal_address == config(overlay)["LEASEHOLD_TEMPORAL_ADDRESS"], doc["metadata"]["name"]
        assert settings.store_backend == "s3"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_commands_are_leasehold_invocations(overlay: str) -> None:
    expected = {"api": ("api", None), "orchestration": ("worker", "orchestration")}
    expected |= {"worker-gpu": ("worker", "gpu"), "worker-ci": ("worker", "ci"), CONTROLLER: ("fleet", None)}
    functions = {"api": cmd_api, "worker": cmd_worker, "fleet": cmd_fleet_run}
    seen = set()
    for doc, container in app_containers(overlay):
        if "command" in container:
            continue  # another program from the image (the dev server, the init Job's shell)
        args = build_parser().parse_args(container["args"])
        command, kind = expected[component(doc)]
        assert args.command == command and getattr(args, "kind", None) == kind
        assert args.func is functions[command]
        assert image_name(container) == ("leasehold-gpu" if kind == "gpu" else "leasehold")
        seen.add(component(doc))
    assert seen - {CONTROLLER} == PROCESSES
    assert (CONTROLLER in seen) is (overlay == "production")


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_select_one_workload_each(overlay: str) -> None:
    pods = {
        doc["metadata"]["name"]: doc["spec"]["template"].get("metadata", {}).get("labels", {})
        for doc in workloads(overlay)
    }
    for doc in workloads(overlay):
        selector = doc["spec"].get("selector", {}).get("matchLabels")
        if selector is not None:
            assert _matches(selector, pods[doc["metadata"]["name"]]), doc["metadata"]["name"]
    selectors = [("Service", name, doc["spec"]["selector"]) for name, doc in of_kind(overlay, "Service").items()]
    selectors += [
        ("PodDisruptionBudget", name, doc["spec"]["selector"]["matchLabels"])
        for name, doc in of_kind(overlay, "PodDisruptionBudget").items()
    ]
    assert selectors
    for kind, name, selector in selectors:
        chosen = [pod for pod, labels in pods.items() if _matches(selector, labels)]
        assert len(chosen) == 1, (kind, name, chosen)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_has_a_disruption_budget(overlay: str) -> None:
    budgets = of_kind(overlay, "PodDisruptionBudget")
    pods = {
        name: doc["spec"]["template"]["metadata"]["labels"]
        for name, doc in of_kind(overlay, "Deployment").items()
        if component(doc) in PROCESSES
    }
    assert {component(deployment(overlay, name)) for name in pods} == PROCESSES
    for name, labels in pods.items():
        assert any(_matches(b["spec"]["selector"]["matchLabels"], labels) for b in budgets.values()), name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_in_cluster_addresses_name_real_services(overlay: str) -> None:
    services = of_kind(overlay, "Service")
    ci_env = container_env(overlay, pod_spec(deployment(overlay, "worker-ci"))["containers"][0])
    host, port = ci_env["LEASEHOLD_API_INTERNAL_URL"].removeprefix("http://").split(":")
    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}
    assert services[host]["spec"]["selector"]["app.kubernetes.io/component"] == "api"
    temporal_host, temporal_port = config(overlay)["LEASEHOLD_TEMPORAL_ADDRESS"].rsplit(":", 1)
    if "." not in temporal_host:  # in this namespace: the overlay brings it
        assert int(temporal_port) in {p["port"] for p in services[temporal_host]["spec"]["ports"]}
    else:  # the Helm release's frontend in its own namespace
        assert temporal_host == "temporal-frontend.temporal.svc.cluster.local" and temporal_port == "7233"


def test_images_are_the_two_the_dockerfile_builds() -> None:
    for overlay in OVERLAYS:
        assert {image_name(c) for _, c in app_containers(overlay)} == set(APP_IMAGES)
    text = (KUBERNETES_DIR / "overlays" / "production" / "kustomization.yaml").read_text()
    assert {image["name"] for image in yaml.safe_load(text)["images"]} == set(APP_IMAGES)
