"""The rendered Kubernetes overlays, and the parts of them the deploy tests look at."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

from leasehold.settings import Settings
from testing.harness import REPO_ROOT
from tests.deploy.kustomize_subset import POD_SPEC_PATHS, build

KUBERNETES_DIR = REPO_ROOT / "deploy" / "kubernetes"
OVERLAYS = tuple(sorted(p.name for p in (KUBERNETES_DIR / "overlays").iterdir() if p.is_dir()))
# The Kubernetes releases every overlay must be valid for: the oldest we support, and the
# newest the pinned kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.31", "1.37")
APP_IMAGES = ("leasehold", "leasehold-gpu")
# Every LEASEHOLD_* name a process reads: one per Settings field, and the config file's.
SETTINGS_ENV = frozenset({f"LEASEHOLD_{name.upper()}" for name in Settings.model_fields} | {"LEASEHOLD_CONFIG_FILE"})
LEASEHOLD_NAME = re.compile(r"\bLEASEHOLD_[A-Z0-9_]+\b")

Doc = dict[str, Any]


@functools.cache
def _rendered(overlay: str) -> tuple[Doc, ...]:
    return tuple(build(KUBERNETES_DIR / "overlays" / overlay))


def rendered(overlay: str) -> list[Doc]:
    """The overlay's objects (a fresh copy: tests may change them)."""
    return copy.deepcopy(list(_rendered(overlay)))


def of_kind(overlay: str, kind: str) -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for doc in rendered(overlay) if doc["kind"] == kind}


def pod_spec(doc: Doc) -> dict[str, Any]:
    spec: Any = doc
    for key in POD_SPEC_PATHS[doc["kind"]]:
        spec = spec[key]
    return spec


def workloads(overlay: str) -> list[Doc]:
    return [doc for doc in rendered(overlay) if doc["kind"] in POD_SPEC_PATHS]


def image_name(container: dict[str, Any]) -> str:
    """The image's repository name without registry and tag (``leasehold-gpu``)."""
    return container["image"].rsplit("/", 1)[-1].split(":", 1)[0]


def app_containers(overlay: str) -> list[tuple[Doc, dict[str, Any]]]:
    """(workload, container) for every container running a leasehold image."""
    return [
        (doc, container)
        for doc in workloads(overlay)
        for container in pod_spec(doc)["containers"]
        if image_name(container) in APP_IMAGES
    ]


def config(overlay: str) -> dict[str, str]:
    """The overlay's ``leasehold-config`` ConfigMap."""
    return dict(of_kind(overlay, "ConfigMap")["leasehold-config"]["data"])


def container_env(overlay: str, container: dict[str, Any]) -> dict[str, Any]:
    """The container's environment: plain values as strings, references as their ``valueFrom``."""
    env: dict[str, Any] = {}
    configmaps = of_kind(overlay, "ConfigMap")
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]]["data"])
    for item in container.get("env", []):
        env[item["name"]] = item["value"] if "value" in item else item["valueFrom"]
    return env


def component(doc: Doc) -> str:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")


def deployment(overlay: str, name: str) -> Doc:
    return of_kind(overlay, "Deployment")[name]


def gpu_deployments(overlay: str) -> dict[str, Doc]:
    """The GPU workers' Deployments (one per pool: model version, GPU class, capacity type), by name."""
    return {name: doc for name, doc in of_kind(overlay, "Deployment").items() if component(doc) == "worker-gpu"}


def manifest_files() -> list[Path]:
    return sorted(p for p in KUBERNETES_DIR.rglob("*") if p.suffix in (".yaml", ".yml") or p.name == "Kustomization")
