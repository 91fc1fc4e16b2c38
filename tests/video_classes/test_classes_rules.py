"""The class rules on their own: configuration, a job's class, a worker's class and its refusals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from leasehold.gpu_classes import GIB, class_of_worker, classes_fitting, job_memory_bytes, parse_classes
from leasehold.settings import Settings
from worker_gpu.gpu_memory import NoGpuClass, report_device
from workflows.queues import video_queue


def test_classes_parse_from_the_environment_form_and_order_smallest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASEHOLD_VIDEO_GPU_CLASSES", "large=80, small=24")
    settings = Settings()
    assert [(c.name, c.memory_gib) for c in settings.gpu_classes] == [("small", 24.0), ("large", 80.0)]
    # Child processes get them back in a form they parse to the same classes.
    monkeypatch.setenv("LEASEHOLD_VIDEO_GPU_CLASSES", settings.to_env()["LEASEHOLD_VIDEO_GPU_CLASSES"])
    assert Settings().gpu_classes == settings.gpu_classes
    assert Settings(video_gpu_classes={}).gpu_classes == ()


@pytest.mark.parametrize("bad", ["small=0", "small=-1", "Small=24", "a.b=24", "small=nan", "small=lots"])
def test_bad_classes_are_refused_at_start(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASEHOLD_VIDEO_GPU_CLASSES", bad)
    with pytest.raises(ValidationError):
        Settings()


def test_a_job_takes_the_smallest_class_that_holds_it() -> None:
    classes = parse_classes({"small": 24, "large": 80, "medium": 40})
    need = job_memory_bytes(frames=96, width=1280, height=720, bytes_per_frame_pixel=300.0)
    assert 24 * GIB < need < 40 * GIB
    assert [c.name for c in classes_fitting(classes, need)] == ["medium", "large"]
    assert classes_fitting(classes, 81 * GIB) == []


def test_a_worker_serves_the_largest_class_its_memory_covers() -> None:
    classes = parse_classes({"small": 24, "large": 80})
    assert class_of_worker(classes, 79 * GIB).name == "small"  # type: ignore[union-attr]
    assert class_of_worker(classes, 80 * GIB).name == "large"  # type: ignore[union-attr]
    assert class_of_worker(classes, 23 * GIB) is None


def test_queues_keep_the_unclassed_name() -> None:
    assert video_queue("procedural-v1", "p-") == "p-video.procedural-v1"
    assert video_queue("procedural-v1", "p-", "small") == "p-video.procedural-v1.small"


def test_a_worker_below_every_class_or_undeclared_refuses_to_start() -> None:
    classed = Settings(video_gpu_classes={"small": 24, "large": 80})
    with pytest.raises(NoGpuClass, match="declare it with --memory-gib"):
        report_device(classed, "cpu")
    with pytest.raises(NoGpuClass, match="below every GPU class"):
        report_device(classed.model_copy(update={"gpu_memory_gib": 16.0}), "cpu")
    report = report_device(classed.model_copy(update={"gpu_memory_gib": 48.0}), "cpu")
    assert report.gpu_class is not None and report.gpu_class.name == "small"
    # Without classes a worker needs no declaration and serves the model's own queue.
    assert report_device(Settings(), "cpu").gpu_class is None
