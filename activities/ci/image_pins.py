"""Images of ``container:`` and ``services:`` pinned to a digest when the push is listed, so every
attempt of a job, and every step of it, runs the same image whatever the tag points at later."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from temporalio.exceptions import ApplicationError

from actions_language.schema import WorkflowSpecError
from workflows.ci.types.spec import ContainerSpec, SpecError, WorkflowSpec

# An image path of the registry mirror (``name:tag``) -> its manifest's digest, ``None`` when
# the mirror does not have it; ``MirrorUnavailable`` when the mirror cannot be asked.
ImageDigests = Callable[[str], str | None]


class MirrorUnavailable(RuntimeError):
    """The registry mirror did not answer: the listing is retried."""


def _containers(spec: WorkflowSpec) -> Iterator[tuple[str, ContainerSpec]]:
    for job in spec.jobs:
        if job.container is not None:
            yield f"jobs.{job.id}.container.image", job.container
        for key, service in job.services.items():
            yield f"jobs.{job.id}.services.{key}.image", service


def pin_images(spec: WorkflowSpec, digests: ImageDigests) -> None:
    """Set each container's ``digest`` (an image named by digest keeps its own)."""
    for key, container in _containers(spec):
        if container.digest is not None:
            continue
        if "@" in container.image:
            container.digest = container.image.rsplit("@", 1)[1]
            continue
        try:
            found = digests(container.image)
        except MirrorUnavailable as exc:
            raise ApplicationError(
                f"the registry mirror did not answer: {exc}", type="CIImageMirrorUnavailable"
            ) from exc
        if found is None:
            message = f"{container.image} is not in this deployment's registry mirror"
            raise WorkflowSpecError(SpecError(file=spec.path, line=container.line, key=key, message=message))
        container.digest = found
