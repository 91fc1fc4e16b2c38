"""The Python renderer of deploy/kubernetes: the same objects as kustomize itself where it is
installed, and a refusal of whatever kustomize feature it lacks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.kustomize_subset import KustomizeError, build, split_image, strategic_merge
from tests.deploy.manifests import KUBERNETES_DIR, OVERLAYS


def _identity(doc: dict) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


def _kustomize_command(directory: Path) -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build", str(directory)]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize", str(directory)]
    return None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renders_what_kustomize_renders(overlay: str) -> None:
    directory = KUBERNETES_DIR / "overlays" / overlay
    command = _kustomize_command(directory)
    if command is None:
        pytest.skip("neither kustomize nor kubectl is installed")
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    theirs = {_identity(doc): doc for doc in yaml.safe_load_all(out) if doc}
    ours = {_identity(doc): doc for doc in build(directory)}
    assert sorted(ours) == sorted(theirs)
    for key, doc in ours.items():
        assert doc == theirs[key], key


def test_strategic_merge_follows_the_merge_keys() -> None:
    base = {
        "spec": {
            "replicas": 1,
            "nodeSelector": {"a": "1"},
            "tolerations": [{"key": "old"}],
            "containers": [
                {"name": "app", "image": "x", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "side", "image": "y"},
            ],
        }
    }
    patch = {
        "spec": {
            "replicas": 3,
            "nodeSelector": None,
            "tolerations": [{"key": "new"}],
            "containers": [{"name": "app", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}],
        }
    }
    merged = strategic_merge(base, patch)
    spec = merged["spec"]
    assert spec["replicas"] == 3
    assert "nodeSelector" not in spec
    # A list without a merge key is replaced; containers and env merge by name.
    assert spec["tolerations"] == [{"key": "new"}]
    assert [c["name"] for c in spec["containers"]] == ["app", "side"]
    assert spec["containers"][0]["image"] == "x"
    assert spec["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
        {"name": "C", "value": "3"},
    ]
    # The inputs are left as they were.
    assert base["spec"]["replicas"] == 1 and patch["spec"]["nodeSelector"] is None


def test_refuses_patch_directives() -> None:
    with pytest.raises(KustomizeError, match="directives"):
        strategic_merge({"a": {"b": 1}}, {"a": {"$patch": "delete"}})


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(data) if isinstance(data, list) else yaml.safe_dump(data))


CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}


def test_refuses_fields_it_does_not_support(tmp_path: Path) -> None:
    _write(tmp_path / "c.yaml", CONFIGMAP)
    _write(tmp_path / "kustomization.yaml", {"resources": ["c.yaml"], "commonLabels": {"a": "b"}})
    with pytest.raises(KustomizeError, match="commonLabels"):
        build(tmp_path)


def test_refuses_a_resource_outside_the_root(tmp_path: Path) -> None:
    _write(tmp_path / "c.yaml", CONFIGMAP)
    _write(tmp_path / "inner" / "kustomization.yaml", {"resources": ["../c.yaml"]})
    with pytest.raises(KustomizeError, match="outside"):
        build(tmp_path / "inner")


def test_refuses_a_patch_without_its_target_and_a_duplicate(tmp_path: Path) -> None:
    _write(tmp_path / "c.yaml", CONFIGMAP)
    _write(tmp_path / "p.yaml", {**CONFIGMAP, "metadata": {"name": "other"}})
    _write(tmp_path / "kustomization.yaml", {"resources": ["c.yaml"], "patches": [{"path": "p.yaml"}]})
    with pytest.raises(KustomizeError, match="matches 0 objects"):
        build(tmp_path)
    _write(tmp_path / "kustomization.yaml", {"resources": ["c.yaml", "c.yaml"]})
    with pytest.raises(KustomizeError, match="defined twice"):
        build(tmp_path)


def test_a_patch_deletes_an_object_one_a_file(tmp_path: Path) -> None:
    deletion = {"$patch": "delete", **CONFIGMAP}
    _write(tmp_path / "c.yaml", [CONFIGMAP, {**CONFIGMAP, "metadata": {"name": "kept"}}])
    _write(tmp_path / "p.yaml", deletion)
    _write(tmp_path / "kustomization.yaml", {"resources": ["c.yaml"], "patches": [{"path": "p.yaml"}]})
    assert [doc["metadata"]["name"] for doc in build(tmp_path)] == ["kept"]
    # kustomize itself fails on several deletions in one file.
    _write(tmp_path / "p.yaml", [deletion, {**deletion, "metadata": {"name": "kept"}}])
    with pytest.raises(KustomizeError, match="deletion"):
        build(tmp_path)


def test_namespace_images_and_components(tmp_path: Path) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "leasehold:latest"}]}}},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    _write(tmp_path / "base" / "d.yaml", [deployment, namespace])
    _write(tmp_path / "base" / "kustomization.yaml", {"resources": ["d.yaml"]})
    _write(tmp_path / "comp" / "c.yaml", CONFIGMAP)
    _write(tmp_path / "comp" / "kustomization.yaml", {"kind": "Component", "resources": ["c.yaml"]})
    _write(
        tmp_path / "top" / "kustomization.yaml",
        {
            "namespace": "n",
            "resources": ["../base"],
            "components": ["../comp"],
            "images": [{"name": "leasehold", "newName": "reg.example:5000/leasehold", "newTag": "1.2"}],
        },
    )
    docs = {doc["kind"]: doc for doc in build(tmp_path / "top")}
    assert docs["Deployment"]["metadata"]["namespace"] == "n"
    assert docs["ConfigMap"]["metadata"]["namespace"] == "n"
    assert "namespace" not in docs["Namespace"]["metadata"]
    assert docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.example:5000/leasehold:1.2"
    # A component is not a kustomization, nor the other way round.
    _write(tmp_path / "top" / "kustomization.yaml", {"resources": ["../comp"]})
    with pytest.raises(KustomizeError, match="Component"):
        build(tmp_path / "top")


def test_split_image() -> None:
    assert split_image("leasehold:latest") == ("leasehold", "latest")
    assert split_image("reg.example:5000/leasehold") == ("reg.example:5000/leasehold", None)
    assert split_image("reg.example:5000/leasehold:1") == ("reg.example:5000/leasehold", "1")
