"""The built-in ``uses:`` actions of a CI job (actions/checkout, actions/cache), run by the
worker itself: they only move the job's own files between the workspace and the tenant's
cache, through the job's tree (as the job), so nothing of them is sandboxed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from activities.ci.cache import CacheError, CICache, read_scopes, ref_scope, workspace_paths
from activities.ci.job_context import shown_name
from activities.ci.jobroot import JobRoot
from activities.ci.logs import LogShipper
from activities.ci.run_records import TrustedRun
from workflows.ci.types.job import StepStatus
from workflows.ci.types.push import PushContext
from workflows.ci.types.spec import ACTION_CACHE, ACTION_CHECKOUT, StepSpec


@dataclass(eq=False)
class BuiltinActions:
    """An attempt's built-in action steps, and the cache saves they leave for the job's end."""

    cache: CICache
    # Tenant and repository as the records say them: the cache's scope.
    trusted: TrustedRun
    push: PushContext
    mount: str
    tree: JobRoot
    log: LogShipper
    heartbeat: Callable[[], None]
    # actions/cache steps whose key missed: saved after the job succeeds (the post step).
    saves: list[tuple[str, list[str]]] = field(default_factory=list, init=False)

    def run(
        self, step: StepSpec, inputs: dict[str, str]
    ) -> tuple[StepStatus, int | None, dict[str, str], dict[str, str]]:
        """A built-in ``uses:`` action, run by the worker itself (nothing of it is sandboxed:
        it only moves the job's own files between the workspace and the tenant's cache)."""
        self.log.line(f"[leasehold] step {step.index + 1}: {shown_name(step.name)}")
        if step.action == ACTION_CHECKOUT:
            self.log.line(f"[leasehold] {step.uses}: the workspace already holds {self.push.commit_sha}")
            return StepStatus.SUCCESS, 0, {}, {}
        assert step.action == ACTION_CACHE
        push = self.push
        key = inputs.get("key", "").strip()
        restore_keys = [k.strip() for k in inputs.get("restore-keys", "").splitlines() if k.strip()]
        try:
            if not key or len(key) > 512 or "\n" in key:
                raise CacheError("the cache key must be one line of at most 512 characters")
            paths = workspace_paths(inputs.get("path", ""), self.mount)
            found = self.cache.lookup(
                self.trusted.tenant_id,
                self.trusted.repo_id,
                read_scopes(push.ref, push.default_branch),
                key,
                restore_keys,
            )
            if found.entry is not None:
                size = self.cache.restore(found.entry, self.tree, paths, self.heartbeat)
                how = "hit" if found.exact else f"restored from {found.entry.key!r}"
                self.log.line(f"[leasehold] cache {how}: {size} bytes into {', '.join(paths)}")
            else:
                self.log.line(f"[leasehold] cache miss for key {key!r}")
        except Exception as exc:
            # As on GitHub, a cache problem (a bad path, a broken archive, the store down) is a
            # warning: the job goes on without the cache.
            self.log.line(f"[leasehold] warning: cache not restored: {exc}")
            return StepStatus.SUCCESS, 0, {"cache-hit": "false"}, {}
        if not found.exact:
            self.saves.append((key, paths))
        return StepStatus.SUCCESS, 0, {"cache-hit": "true" if found.exact else "false"}, {}

    def save_caches(self) -> None:
        """The post step of each missed actions/cache step: save into this ref's own scope."""
        push = self.push
        for key, paths in self.saves:
            try:
                size = self.cache.save(
                    self.trusted.tenant_id,
                    self.trusted.repo_id,
                    ref_scope(push.ref),
                    key,
                    self.tree,
                    paths,
                    self.heartbeat,
                )
            except Exception as exc:
                self.log.line(f"[leasehold] warning: cache {key!r} not saved: {exc}")
                continue
            if size is None:
                self.log.line(f"[leasehold] cache {key!r} not saved: none of its paths exist")
            else:
                self.log.line(f"[leasehold] cache {key!r} saved ({size} bytes)")
