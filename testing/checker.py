"""A Jepsen-style checker for job submission under faults.

Clients give every job a unique key (an idempotency key) and record a history of what they
did and what they were told: ``invoke`` before a submit, then ``ok`` (acknowledged, with the
job id), ``fail`` (a definite refusal, e.g. 4xx: the job must not exist) or ``info``
(indeterminate: a timeout, a reset connection, a 5xx; the job may or may not exist). After
the faults, the test observes what the system holds (every job it lists, with the key it
was submitted under, its final status and the results it points at) and ``check`` classifies
every key:

* ``ok``: acknowledged (or indeterminate) and held exactly once, in the expected final status,
  pointing at exactly one result (when results are expected), with no other stored result;
* ``lost``: acknowledged but not held, or held but not in the expected final status;
* ``duplicated``: held more than once, or pointing at (or leaving stored) more than one result;
* ``unexpected``: held although never submitted, or refused with a definite ``fail``.

A test passes only when every key is ``ok``. The history is kept as JSON lines so a failure
can be replayed by reading it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path


class OpType(StrEnum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True)
class Event:
    """One line of the history."""

    type: OpType
    key: str
    client: str
    at: float
    job_id: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class Observation:
    """A job the system holds at the end, as the test found it.

    ``key`` is the key the job was submitted under as the system records it (``None`` when
    the job carries no recognisable key); ``results`` are the result objects the job points
    at; ``stored_results`` every result object found in storage for it (any attempt).
    """

    job_id: str
    key: str | None
    status: str
    results: tuple[str, ...] = ()
    stored_results: tuple[str, ...] = ()


class Verdict(StrEnum):
    OK = "ok"
    LOST = "lost"
    DUPLICATED = "duplicated"
    UNEXPECTED = "unexpected"


@dataclass
class Classified:
    key: str
    verdict: Verdict
    reason: str = ""
    job_ids: list[str] = field(default_factory=list)


@dataclass
class Report:
    """The verdict for every key; ``ok`` only when every key is ``ok``."""

    items: list[Classified]

    @property
    def ok(self) -> bool:
        return all(item.verdict is Verdict.OK for item in self.items)

    def count(self, verdict: Verdict) -> int:
        return sum(1 for item in self.items if item.verdict is verdict)

    def failures(self) -> list[Classified]:
        return [item for item in self.items if item.verdict is not Verdict.OK]

    def summary(self) -> str:
        counts = ", ".join(f"{v.value}={self.count(v)}" for v in Verdict)
        lines = [f"{len(self.items)} keys: {counts}"]
        for item in self.failures()[:20]:
            lines.append(f"  {item.verdict.value}: {item.key} {item.job_ids} {item.reason}")
        return "\n".join(lines)


class History:
    """Thread-safe append-only history; also written to ``path`` (JSON lines) when given."""

    def __init__(self, path: Path | None = None) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def record(self, type: OpType, key: str, client: str, job_id: str | None = None, detail: str = "") -> Event:
        event = Event(type=type, key=key, client=client, at=time.time(), job_id=job_id, detail=detail)
        with self._lock:
            self._events.append(event)
            if self._path is not None:
                with self._path.open("a") as out:
                    out.write(json.dumps(asdict(event)) + "\n")
        return event

    def invoke(self, key: str, client: str) -> Event:
        return self.record(OpType.INVOKE, key, client)

    def ok(self, key: str, client: str, job_id: str) -> Event:
        return self.record(OpType.OK, key, client, job_id)

    def fail(self, key: str, client: str, detail: str) -> Event:
        return self.record(OpType.FAIL, key, client, detail=detail)

    def info(self, key: str, client: str, detail: str) -> Event:
        return self.record(OpType.INFO, key, client, detail=detail)

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def acknowledged(self) -> dict[str, str]:
        """key -> job id of every acknowledged submit."""
        return {e.key: e.job_id for e in self.events if e.type is OpType.OK and e.job_id is not None}

    def restricted(self, keys: Iterable[str]) -> History:
        """The events of ``keys`` only (a scenario that mixes job kinds checks each apart)."""
        wanted = set(keys)
        part = History()
        part._events = [e for e in self.events if e.key in wanted]
        return part

    @classmethod
    def load(cls, path: Path) -> History:
        history = cls()
        for line in path.read_text().splitlines():
            raw = json.loads(line)
            raw["type"] = OpType(raw["type"])
            history._events.append(Event(**raw))
        return history


def check(
    history: History,
    observations: Iterable[Observation],
    expected_status: str = "completed",
    results_per_job: int | None = 1,
) -> Report:
    """Classify every key seen in ``history`` or ``observations`` (see the module docstring).

    ``results_per_job``: how many result objects an ``ok`` job points at (``None``: not checked).
    """
    by_key: dict[str, list[Event]] = defaultdict(list)
    for event in history.events:
        by_key[event.key].append(event)
    held: dict[str, list[Observation]] = defaultdict(list)
    items: list[Classified] = []
    for obs in observations:
        if obs.key is None or obs.key not in by_key:
            items.append(Classified(obs.key or "?", Verdict.UNEXPECTED, "held but never submitted", [obs.job_id]))
            continue
        held[obs.key].append(obs)

    for key, events in by_key.items():
        types = {e.type for e in events}
        acked_ids = {e.job_id for e in events if e.type is OpType.OK and e.job_id is not None}
        found = held.get(key, [])
        ids = [o.job_id for o in found]
        if OpType.INVOKE not in types:
            items.append(Classified(key, Verdict.UNEXPECTED, "completion without an invocation", ids))
            continue
        if OpType.OK not in types and OpType.INFO not in types:
            # Only definite refusals (or nothing heard at all, which a client never leaves).
            if found:
                items.append(Classified(key, Verdict.UNEXPECTED, "refused, yet held", ids))
            elif OpType.FAIL not in types:
                items.append(Classified(key, Verdict.LOST, "invoked but never answered or recorded", ids))
            else:
                items.append(Classified(key, Verdict.OK, "refused and not held", ids))
            continue
        if len(found) > 1:
            items.append(Classified(key, Verdict.DUPLICATED, f"held {len(found)} times", ids))
            continue
        if len(acked_ids) > 1:
            items.append(Classified(key, Verdict.DUPLICATED, f"acknowledged as {sorted(acked_ids)}", ids))
            continue
        if not found:
            if OpType.OK in types:
                items.append(Classified(key, Verdict.LOST, "acknowledged but not held", ids))
            else:
                items.append(Classified(key, Verdict.OK, "indeterminate and not held", ids))
            continue
        obs = found[0]
        if acked_ids and obs.job_id not in acked_ids:
            items.append(Classified(key, Verdict.DUPLICATED, f"held as {obs.job_id}, acknowledged as {acked_ids}", ids))
            continue
        if obs.status != expected_status:
            items.append(Classified(key, Verdict.LOST, f"ended {obs.status}, expected {expected_status}", ids))
            continue
        if results_per_job is not None:
            if len(obs.results) != results_per_job:
                verdict = Verdict.DUPLICATED if len(obs.results) > results_per_job else Verdict.LOST
                items.append(Classified(key, verdict, f"points at {len(obs.results)} results", ids))
                continue
            extra = sorted(set(obs.stored_results) - set(obs.results))
            if extra:
                items.append(Classified(key, Verdict.DUPLICATED, f"stray stored results {extra}", ids))
                continue
            missing = sorted(set(obs.results) - set(obs.stored_results))
            if missing:
                items.append(Classified(key, Verdict.LOST, f"result objects missing from storage {missing}", ids))
                continue
        items.append(Classified(key, Verdict.OK, "", ids))
    return Report(items)
