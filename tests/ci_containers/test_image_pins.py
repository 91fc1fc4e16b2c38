"""Images pinned when the push is listed: against the tests' real registry mirror, a tag becomes
the digest skopeo reads for it, an image the mirror lacks is refused naming the key, and a mirror
that does not answer is an infrastructure error (the listing is retried)."""

from __future__ import annotations

import json
import subprocess

import pytest
from temporalio.exceptions import ApplicationError

from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from activities.ci.image_pins import pin_images
from leasehold.devserver import free_port
from tests.ci_containers.conftest import Mirror
from worker_ci.images import RegistryDigests

WORKFLOW = """
on: push
jobs:
  a:
    runs-on: linux
    container: {image}
    services:
      db:
        image: {service}
    steps:
      - run: echo hi
"""


def skopeo_digest(host: str, path: str) -> str:
    out = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{host}/{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return str(json.loads(out)["Digest"])


def test_tags_are_pinned_to_the_mirrors_digest(oci_mirror: Mirror) -> None:
    spec = parse_workflow(
        ".github/workflows/a.yml", WORKFLOW.format(image=oci_mirror.base, service=oci_mirror.postgres)
    )
    pin_images(spec, RegistryDigests(oci_mirror.host, tls_verify=False))
    job = spec.jobs[0]
    assert job.container is not None
    assert job.container.digest == skopeo_digest(oci_mirror.host, oci_mirror.base)
    assert job.services["db"].digest == skopeo_digest(oci_mirror.host, oci_mirror.postgres)
    assert job.container.digest != job.services["db"].digest


def test_an_image_missing_from_the_mirror_is_refused_naming_the_key(oci_mirror: Mirror) -> None:
    text = WORKFLOW.format(image=oci_mirror.base, service="leasehold/not-there:1")
    spec = parse_workflow(".github/workflows/a.yml", text)
    with pytest.raises(WorkflowSpecError) as caught:
        pin_images(spec, RegistryDigests(oci_mirror.host, tls_verify=False))
    assert caught.value.error.key == "jobs.a.services.db.image"
    assert "not in this deployment's registry mirror" in caught.value.error.message


def test_a_mirror_that_does_not_answer_is_retried() -> None:
    spec = parse_workflow(".github/workflows/a.yml", WORKFLOW.format(image="x/y:1", service="x/z:1"))
    with pytest.raises(ApplicationError) as caught:
        pin_images(spec, RegistryDigests(f"127.0.0.1:{free_port()}", tls_verify=False))
    assert caught.value.type == "CIImageMirrorUnavailable" and not caught.value.non_retryable
