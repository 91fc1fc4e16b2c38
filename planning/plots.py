"""The report's figures as PNG files (matplotlib, the ``plan`` extra; drawn off-screen)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planning.report import Report, percentile, summarise
from planning.results import RunResult


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed (``pip install 'leasehold[plan]'``)."""


def draw(report: Report, directory: Path) -> list[Path]:
    """Draw what ``report`` holds into ``directory``; the paths written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotsUnavailable("matplotlib is not installed: pip install 'leasehold[plan]'") from None
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    runs = list(report.results.items())
    if runs:
        written.append(_draw_waits(runs, directory, plt))
        written.append(_draw_timeline(runs, directory, plt))
    if report.searches:
        written.append(_draw_fleet(report, directory, plt))
    if report.sweep:
        written.append(_draw_sweep(report, directory, plt))
    return written


def _draw_waits(runs: list[tuple[str, RunResult]], directory: Path, plt: Any) -> Path:
    """Waits by tier: the distribution of every run kept, one panel per run."""
    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 3.6), squeeze=False)
    for ax, (name, result) in zip(axes[0], runs, strict=True):
        for tier, figures in result.tiers.items():
            waits = sorted(figures.waits)
            if waits:
                ax.plot(waits, [(i + 1) / len(waits) for i in range(len(waits))], label=tier)
        ax.set_xscale("symlog", linthresh=1.0)
        _label(ax, name, "queue wait (s)", "share of jobs")
        ax.legend()
    fig.tight_layout()
    return _save(fig, directory / "waits.png", plt)


def _draw_timeline(runs: list[tuple[str, RunResult]], directory: Path, plt: Any) -> Path:
    """Queue, busy GPUs and the free tier's ETA over time."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.8 * len(runs)), squeeze=False)
    for ax, (name, result) in zip(axes[:, 0], runs, strict=True):
        series = result.series
        t = [p[0] / 60 for p in series]
        ax.plot(t, [p[1] for p in series], label="waiting paid")
        ax.plot(t, [p[2] for p in series], label="waiting free")
        ax.plot(t, [p[3] for p in series], label="GPUs busy")
        ax.plot(t, [p[4] for p in series], label="GPUs serving")
        ax.axvspan(result.scenario.warmup_seconds / 60, result.scenario.horizon_seconds / 60, alpha=0.08)
        _label(ax, f"{name}: queue and fleet (shaded: measured window)", "minutes")
        eta = ax.twinx()
        eta.plot(t, [p[5] if p[5] is not None else float("nan") for p in series], "k:", label="free ETA (s)")
        eta.set_ylabel("free wait told (s)")
        ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return _save(fig, directory / "timeline.png", plt)


def _draw_fleet(report: Report, directory: Path, plt: Any) -> Path:
    """The fleet search: the worst tier's wait against the GPUs tried, per class."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for search in report.searches:
        runs_sorted = sorted(search.runs)
        ax.plot([g for g, _w, _m in runs_sorted], [w or 0.0 for _g, w, _m in runs_sorted], "o-", label=search.gpu_class)
        if search.gpus is not None:
            ax.axvline(search.gpus, ls="--", alpha=0.5)
    ax.set_yscale("symlog", linthresh=1.0)
    _label(ax, "fleet search", "GPUs", "worst tier's target-percentile wait (s)")
    ax.legend()
    fig.tight_layout()
    return _save(fig, directory / "fleet.png", plt)


def _draw_sweep(report: Report, directory: Path, plt: Any) -> Path:
    """The checkpoint-interval sweep: goodput and cost per video."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    intervals = [i for i, _r in report.sweep]
    summaries = [summarise(r) for _i, r in report.sweep]
    ax.plot(intervals, [s.goodput * 100 for s in summaries], "o-", label="goodput (% of held GPU time)")
    ax.set_xscale("log")
    _label(ax, "checkpoint interval: goodput and cost", "checkpoint interval (s)", "goodput %")
    cost = ax.twinx()
    cost.plot(intervals, [s.cost_per_video or 0.0 for s in summaries], "s--", color="tab:red", label="$ per video")
    cost.set_ylabel("$ per video")
    fig.legend(loc="lower center", fontsize=7)
    fig.tight_layout()
    return _save(fig, directory / "checkpoint.png", plt)


def _label(ax: Any, title: str, xlabel: str, ylabel: str | None = None) -> None:
    """A panel's title, axis labels and light grid."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _save(fig: object, path: Path, plt: object) -> Path:
    fig.savefig(path, dpi=110)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[attr-defined]
    return path


__all__ = ["PlotsUnavailable", "draw", "percentile"]
