"""``KubernetesProvider``: one Deployment per pool, scaled through the Kubernetes API with the
official ``kubernetes`` client (the ``fleet`` extra).

Each pool ``<model>[.<class>]@<type>`` is the Deployment ``deployment_name(pool)`` in the
provider's namespace; its pods carry the label ``leasehold.dev/pool=<same name>``. Growing is a
scale-up. Retiring drains first: the chosen pods (idle ones, by the identity their pollers
report, whose host is the pod's name) get the annotation
``controller.kubernetes.io/pod-deletion-cost=-1000``, so the ReplicaSet deletes exactly those
on the scale-down; the kubelet's SIGTERM is the worker's preemption notice (it stops
polling, checkpoints, hands its job back, exits). The pods' ``terminationGracePeriodSeconds``
must cover that (45 s or more). Workers outlive the controller: ``close`` changes nothing.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from workflows.fleet.types import FleetPool
from workflows.queues import GPU_GRACEFUL_SHUTDOWN

log = logging.getLogger(__name__)

POOL_LABEL = "leasehold.dev/pool"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# Past the worker's own graceful shutdown: the kubelet's kill and the API's bookkeeping.
GONE_WITHIN_SECONDS = GPU_GRACEFUL_SHUTDOWN.total_seconds() + 15.0
MERGE_PATCH = "application/merge-patch+json"


class KubernetesUnavailable(RuntimeError):
    """The ``kubernetes`` package is missing, or no cluster configuration was found."""


class DeploymentMissing(RuntimeError):
    """A pool has no Deployment to scale (the provider creates none: manifests do)."""


def deployment_name(pool: FleetPool) -> str:
    """``leasehold-gpu-<model>[-<class>]-<type>``, as a DNS label (at most 63 characters)."""
    raw = "-".join(["leasehold-gpu", pool.model, *([pool.gpu_class] if pool.gpu_class else []), pool.capacity_type])
    return re.sub(r"[^a-z0-9-]", "-", raw.lower())[:63].rstrip("-")


class KubernetesProvider:
    """Scales the pools' Deployments in ``namespace`` through ``api_client`` (a
    ``kubernetes.client.ApiClient``)."""

    def __init__(self, api_client: Any, namespace: str = "default") -> None:
        from kubernetes import client

        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self._api_exception = client.ApiException

    @classmethod
    def from_environment(cls, namespace: str = "default") -> KubernetesProvider:
        """In-cluster configuration (a service account), else the user's kubeconfig."""
        try:
            from kubernetes import client, config
        except ImportError:
            raise KubernetesUnavailable(
                "the kubernetes provider needs the kubernetes package: pip install 'leasehold[fleet]'"
            ) from None
        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config()
            except (config.ConfigException, OSError) as exc:
                raise KubernetesUnavailable(f"no Kubernetes configuration found: {exc}") from None
        return cls(client.ApiClient(), namespace)

    def _scale(self, pool: FleetPool) -> int:
        name = deployment_name(pool)
        try:
            scale = self.apps.read_namespaced_deployment_scale(name, self.namespace)
        except self._api_exception as exc:
            if exc.status == 404:
                raise DeploymentMissing(f"no Deployment {self.namespace}/{name} for pool {pool.key}") from None
            raise
        return int(scale.spec.replicas or 0)

    def _set_replicas(self, pool: FleetPool, replicas: int) -> None:
        self.apps.patch_namespaced_deployment_scale(
            deployment_name(pool), self.namespace, {"spec": {"replicas": replicas}}, _content_type=MERGE_PATCH
        )

    def running(self, pool: FleetPool) -> int:
        return self._scale(pool)

    def start(self, pool: FleetPool, count: int) -> int:
        self._set_replicas(pool, self._scale(pool) + count)
        log.info("fleet: scaled %s up by %d", deployment_name(pool), count)
        return count

    def retire(self, pool: FleetPool, count: int, idle: list[str], beat: Callable[[], None]) -> list[str]:
        replicas = self._scale(pool)
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{POOL_LABEL}={deployment_name(pool)}"
        ).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        idle_hosts = {identity.rsplit("@", 1)[-1] for identity in idle}
        # Idle pods first, then the youngest (the least warm).
        live.sort(key=lambda p: (p.metadata.name not in idle_hosts, -_created(p)))
        chosen = [p.metadata.name for p in live[:count]]
        for name in chosen:
            patch = {"metadata": {"annotations": {DELETION_COST: "-1000"}}}
            self.core.patch_namespaced_pod(name, self.namespace, patch, _content_type=MERGE_PATCH)
        self._set_replicas(pool, max(0, replicas - len(chosen)))
        log.info("fleet: draining %s from %s", ", ".join(chosen) or "nothing", deployment_name(pool))
        deadline = time.monotonic() + GONE_WITHIN_SECONDS
        waiting = set(chosen)
        while waiting and time.monotonic() < deadline:
            beat()
            for name in list(waiting):
                try:
                    self.core.read_namespaced_pod(name, self.namespace)
                except self._api_exception as exc:
                    if exc.status == 404:
                        waiting.discard(name)
                    else:
                        raise
            if waiting:
                time.sleep(0.5)
        if waiting:
            log.warning("fleet: pods %s still terminating after their drain", ", ".join(sorted(waiting)))
        return [f"{pool.key}/{name}" for name in chosen]

    def close(self) -> None:
        return None


def _created(pod: Any) -> float:
    created = pod.metadata.creation_timestamp
    return created.timestamp() if created is not None else 0.0
