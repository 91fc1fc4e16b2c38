"""One OCI stack for the package: the tests' registry mirror (filled with images built here from
a Debian root filesystem), the API, an orchestration worker and a CI worker set to the OCI
backend, as real processes against the session's dev server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from testing.oci_images import BASE, POSTGRES
from testing.oci_registry import push, running_registry
from tests.ci_api.conftest import CIStack, running_ci_stack
from tests.conftest import in_ci

TOOLS = ("podman", "runc", "mmdebstrap", "skopeo", "docker-registry", "iptables")


def oci_tools_or_skip() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    why = f"not installed: {', '.join(missing)}" if missing else "the OCI backend needs root"
    if missing or os.geteuid() != 0:
        if in_ci():
            pytest.fail(f"{why}; CI installs the system packages (make system-deps) and runs as root")
        pytest.skip(why)


@dataclass
class Mirror:
    """The registry mirror and the paths of the tests' images in it."""

    host: str
    base: str
    postgres: str


@pytest.fixture(scope="session")
def oci_mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    oci_tools_or_skip()
    logs = tmp_path_factory.mktemp("registry")
    with running_registry(logs) as host:
        yield Mirror(host, push(host, BASE), push(host, POSTGRES))


def oci_settings(mirror: Mirror) -> dict[str, object]:
    return {
        "ci_sandbox": "oci",
        "ci_oci_registry": mirror.host,
        "ci_oci_registry_tls_verify": False,
        "ci_oci_image": mirror.base,
        "ci_max_concurrent_jobs": 3,
        # A uid range of its own: no other package's jobs share these uids.
        "ci_sandbox_uid_base": 1_720_000,
        "ci_sandbox_uid_count": 32,
    }


@pytest.fixture(scope="package")
def oci_stack(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory, oci_mirror: Mirror
) -> Iterator[CIStack]:
    root: Path = tmp_path_factory.mktemp("ci-oci")
    with running_ci_stack(temporal_env, root, **oci_settings(oci_mirror)) as stack:
        stack.start_workers()
        yield stack
