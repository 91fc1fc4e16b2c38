"""Task-queue names, timeouts and retry policies: every such constant lives here.

Queue names take the deployment's ``queue_prefix`` (a setting, empty by default); the API
resolves full names and passes them to workflows in their inputs, because workflows never
read configuration.
"""

from __future__ import annotations

ORCHESTRATION = "orchestration"


def orchestration_queue(prefix: str = "") -> str:
    """Workflows and light housekeeping activities run here."""
    return f"{prefix}{ORCHESTRATION}"


def video_queue(model: str, prefix: str = "") -> str:
    """Each model version has its own queue; a GPU worker polls exactly one."""
    return f"{prefix}video.{model}"


def ci_queue(labels: list[str] | tuple[str, ...], prefix: str = "") -> str:
    """A CI job's ``runs-on`` labels, order-insensitive, name its queue."""
    return f"{prefix}ci." + "+".join(sorted(set(labels)))
