"""The part of kustomize that deploy/kubernetes uses, in Python, so the overlays render where no
``kubectl`` or ``kustomize`` is installed.

Supported: ``resources`` (files and directories), ``components``, ``patches`` (strategic merge
patches from a file, matched by kind and name; of the patch directives only a whole object's
``$patch: delete``), ``namespace`` (with the service accounts a binding names) and ``images``. Anything else in
a kustomization is refused rather than ignored, so a manifest that starts using a feature this
renderer lacks fails here instead of rendering wrong. Where ``kubectl`` is installed,
tests/deploy/test_kustomize_subset.py checks that both render every overlay to the same objects.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KNOWN_FIELDS = {"apiVersion", "kind", "resources", "components", "patches", "namespace", "images"}
# Lists a strategic merge patch merges item by item, and the field naming an item (the
# patchMergeKey of the Kubernetes API types); every other list is replaced whole.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "topologySpreadConstraints": "topologyKey",
}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "PriorityClass",
    "StorageClass",
}
# Where the pod spec sits in each workload kind (images are set there).
POD_SPEC_PATHS = {
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


class KustomizeError(ValueError):
    """A kustomization this renderer cannot render (or that kustomize would refuse)."""


Doc = dict[str, Any]


def build(directory: Path) -> list[Doc]:
    """The objects ``kubectl kustomize directory`` would print, in no particular order."""
    return _build(directory.resolve(), expect_kind="Kustomization")


def _load_kustomization(directory: Path) -> dict[str, Any]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            data = yaml.safe_load(path.read_text()) or {}
            unknown = set(data) - KNOWN_FIELDS
            if unknown:
                raise KustomizeError(f"{path}: fields this renderer does not support: {', '.join(sorted(unknown))}")
            return data
    raise KustomizeError(f"{directory}: no kustomization file")


def _build(directory: Path, expect_kind: str) -> list[Doc]:
    kustomization = _load_kustomization(directory)
    kind = kustomization.get("kind", "Kustomization")
    if kind != expect_kind:
        raise KustomizeError(f"{directory}: a {kind} where a {expect_kind} belongs")
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        docs.extend(_resource(directory, entry))
    _check_unique(docs, directory)
    for entry in kustomization.get("components", []):
        docs = _apply_component(docs, _inside(directory, entry))
    for patch in kustomization.get("patches", []):
        _apply_patch_entry(docs, directory, patch)
    images = kustomization.get("images", [])
    if images:
        for doc in docs:
            _set_images(doc, images)
    namespace = kustomization.get("namespace")
    if namespace:
        for doc in docs:
            if doc.get("kind") not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = namespace
            # As kustomize does: a binding's service accounts named without a namespace are
            # the kustomization's own.
            if doc.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                for subject in doc.get("subjects", []):
                    if subject.get("kind") == "ServiceAccount" and not subject.get("namespace"):
                        subject["namespace"] = namespace
    return docs


def _inside(directory: Path, entry: str) -> Path:
    path = (directory / entry).resolve()
    if not path.exists():
        raise KustomizeError(f"{directory}: {entry} does not exist")
    return path


def _resource(directory: Path, entry: str) -> list[Doc]:
    path = _inside(directory, entry)
    if path.is_dir():
        return _build(path, expect_kind="Kustomization")
    # kustomize's default load restrictor: a file must lie inside the kustomization's root.
    if directory not in path.parents:
        raise KustomizeError(f"{directory}: {entry} is outside the kustomization's directory")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _apply_component(docs: list[Doc], directory: Path) -> list[Doc]:
    """A Component adds its resources to the parent's, then patches the whole set."""
    kustomization = _load_kustomization(directory)
    if kustomization.get("kind") != "Component":
        raise KustomizeError(f"{directory}: listed as a component but is a {kustomization.get('kind')}")
    for key in ("namespace", "images"):
        if key in kustomization:
            raise KustomizeError(f"{directory}: {key} in a component is not supported here")
    docs = docs + [doc for entry in kustomization.get("resources", []) for doc in _resource(directory, entry)]
    _check_unique(docs, directory)
    for patch in kustomization.get("patches", []):
        _apply_patch_entry(docs, directory, patch)
    return docs


def _identity(doc: Doc) -> tuple[str, str, str]:
    meta = doc.get("metadata") or {}
    return doc.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


def _check_unique(docs: list[Doc], directory: Path) -> None:
    seen: set[tuple[str, str, str]] = set()
    for doc in docs:
        key = _identity(doc)
        if key in seen:
            raise KustomizeError(f"{directory}: {key[0]} {key[2]} is defined twice")
        seen.add(key)


def _apply_patch_entry(docs: list[Doc], directory: Path, entry: dict[str, Any]) -> None:
    if set(entry) != {"path"}:
        raise KustomizeError(f"{directory}: only patches given by path are supported, not {sorted(entry)}")
    patches = [doc for doc in yaml.safe_load_all(_inside(directory, entry["path"]).read_text()) if doc]
    if len(patches) > 1 and any(patch.get("$patch") == "delete" for patch in patches):
        # kustomize 5.5 crashes on it: one deletion a file.
        raise KustomizeError(f"{directory}: {entry['path']} holds a deletion beside other patches")
    for patch in patches:
        kind, _, name = _identity(patch)
        targets = [doc for doc in docs if doc.get("kind") == kind and doc["metadata"].get("name") == name]
        if len(targets) != 1:
            raise KustomizeError(f"{directory}: patch {entry['path']} matches {len(targets)} objects ({kind} {name})")
        # An overlay leaves out an object its base brings (production-keda: the fleet controller).
        if patch.get("$patch") == "delete":
            docs[:] = [doc for doc in docs if doc is not targets[0]]
            continue
        merged = strategic_merge(targets[0], patch)
        targets[0].clear()
        targets[0].update(merged)


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """``patch`` merged into ``base`` as a strategic merge patch without directives: maps merge
    key by key (null deletes), lists in MERGE_KEYS merge item by item, other values replace."""
    if isinstance(patch, dict) and isinstance(base, dict):
        if any(key.startswith("$") for key in patch):
            raise KustomizeError(f"patch directives are not supported here: {sorted(patch)}")
        out = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(patch, list) and isinstance(base, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        out_list = copy.deepcopy(base)
        for item in patch:
            index = next((i for i, old in enumerate(out_list) if old.get(key) == item.get(key)), None)
            if index is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[index] = strategic_merge(out_list[index], item, field)
        return out_list
    return copy.deepcopy(patch)


def split_image(image: str) -> tuple[str, str | None]:
    """``name[:tag]`` as (name, tag); a registry's port is not a tag."""
    name, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        return image, None
    return name, tag


def _set_images(doc: Doc, images: list[dict[str, Any]]) -> None:
    path = POD_SPEC_PATHS.get(doc.get("kind", ""))
    if path is None:
        return
    spec: Any = doc
    for key in path:
        spec = spec.get(key) if isinstance(spec, dict) else None
    if not isinstance(spec, dict):
        return
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        name, tag = split_image(container.get("image", ""))
        for image in images:
            if image["name"] == name:
                unknown = set(image) - {"name", "newName", "newTag"}
                if unknown:
                    raise KustomizeError(f"images: fields this renderer does not support: {sorted(unknown)}")
                name = image.get("newName", name)
                tag = str(image["newTag"]) if "newTag" in image else tag
                container["image"] = f"{name}:{tag}" if tag else name
                break
