"""``LocalProcessProvider``: GPU workers as child processes of ``leasehold fleet run``.

Each worker is ``leasehold worker gpu --model M --capacity-type T`` with this process's
settings (environment), logging to ``<data dir>/logs/fleet/``. Retiring one sends SIGTERM,
the preemption notice, and waits for it to exit (its job checkpointed and handed back);
one that outlives the wait is killed. Closing the provider retires every worker.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from workflows.fleet.types import FleetPool
from workflows.queues import GPU_GRACEFUL_SHUTDOWN

log = logging.getLogger(__name__)

# Past the worker's own graceful shutdown: unload, close the connection, exit.
EXIT_GRACE_SECONDS = GPU_GRACEFUL_SHUTDOWN.total_seconds() + 15.0


class LocalProcessProvider:
    """Real worker processes on this machine, by pool key."""

    def __init__(self, logs: Path, env: dict[str, str] | None = None, python: str = sys.executable) -> None:
        self.logs = logs
        self.env = dict(os.environ if env is None else env)
        # Each worker picks its own metrics port.
        self.env["LEASEHOLD_METRICS_PORT"] = "0"
        self.python = python
        self._procs: dict[str, list[tuple[subprocess.Popen[bytes], IO[bytes]]]] = {}
        self._lock = threading.Lock()

    def _live(self, pool: FleetPool) -> list[subprocess.Popen[bytes]]:
        with self._lock:
            entries = self._procs.get(pool.key, [])
            alive = [(p, f) for p, f in entries if p.poll() is None]
            for proc, out in entries:
                if proc.poll() is not None:
                    out.close()
                    log.warning("fleet: worker %s of %s exited by itself (%s)", proc.pid, pool.key, proc.returncode)
            self._procs[pool.key] = alive
            return [p for p, _ in alive]

    def running(self, pool: FleetPool) -> int:
        return len(self._live(pool))

    def pids(self, pool: FleetPool) -> list[int]:
        """The live workers' process ids, oldest first."""
        return [p.pid for p in self._live(pool)]

    def start(self, pool: FleetPool, count: int) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        command = [self.python, "-m", "cli.main", "worker", "gpu", "--model", pool.model]
        command += ["--capacity-type", pool.capacity_type]
        if pool.memory_gib is not None:
            command += ["--memory-gib", str(pool.memory_gib)]
        for _ in range(count):
            out = (self.logs / f"{pool.key}-{time.time_ns()}.log").open("ab")
            proc = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            with self._lock:
                self._procs.setdefault(pool.key, []).append((proc, out))
            log.info("fleet: started worker %s for %s", proc.pid, pool.key)
        return count

    def retire(self, pool: FleetPool, count: int, idle: list[str], beat: Callable[[], None]) -> list[str]:
        live = self._live(pool)
        idle_pids = {p.pid for p in live if any(f"-{p.pid}@" in identity for identity in idle)}
        # Idle workers first, then the newest (the one with the least warm cache).
        chosen = sorted(live, key=lambda p: (p.pid not in idle_pids, -live.index(p)))[:count]
        for proc in chosen:
            log.info(
                "fleet: draining worker %s of %s (%s)", proc.pid, pool.key, "idle" if proc.pid in idle_pids else "busy"
            )
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + EXIT_GRACE_SECONDS
        for proc in chosen:
            while proc.poll() is None and time.monotonic() < deadline:
                beat()
                time.sleep(0.2)
            if proc.poll() is None:
                log.warning("fleet: worker %s did not exit after its drain; killing it", proc.pid)
                proc.kill()
                proc.wait()
        with self._lock:
            kept = []
            for proc, out in self._procs.get(pool.key, []):
                if proc in chosen:
                    out.close()
                else:
                    kept.append((proc, out))
            self._procs[pool.key] = kept
        return [f"{pool.key}/{proc.pid}" for proc in chosen]

    def close(self) -> None:
        with self._lock:
            entries = [e for group in self._procs.values() for e in group]
        for proc, _out in entries:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, out in entries:
            try:
                proc.wait(timeout=EXIT_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            out.close()
