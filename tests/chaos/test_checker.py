"""The checker itself, on synthetic histories: each verdict, and the edge cases between them."""

from __future__ import annotations

from pathlib import Path

from testing.checker import History, Observation, Verdict, check


def done(
    job_id: str, key: str, results: tuple[str, ...] = ("r",), stored: tuple[str, ...] | None = None
) -> Observation:
    return Observation(job_id, key, "completed", results, results if stored is None else stored)


def verdicts(history: History, observations: list[Observation]) -> dict[str, Verdict]:
    return {item.key: item.verdict for item in check(history, observations).items}


def test_acknowledged_and_held_once_with_one_result_is_ok(tmp_path: Path) -> None:
    h = History(tmp_path / "h.jsonl")
    h.invoke("k1", "c1")
    h.ok("k1", "c1", "j1")
    report = check(h, [done("j1", "k1")])
    assert report.ok and report.count(Verdict.OK) == 1, report.summary()
    # The history file replays to the same verdict.
    assert check(History.load(tmp_path / "h.jsonl"), [done("j1", "k1")]).ok


def test_acknowledged_but_not_held_or_not_finished_is_lost() -> None:
    h = History()
    for key in ("gone", "stuck", "failed"):
        h.invoke(key, "c")
        h.ok(key, "c", f"j-{key}")
    got = verdicts(
        h,
        [
            Observation("j-stuck", "stuck", "in_progress"),
            Observation("j-failed", "failed", "failed"),
        ],
    )
    assert got == {"gone": Verdict.LOST, "stuck": Verdict.LOST, "failed": Verdict.LOST}


def test_invoked_and_never_answered_is_lost() -> None:
    h = History()
    h.invoke("k", "c")
    assert verdicts(h, []) == {"k": Verdict.LOST}


def test_held_twice_or_two_results_or_a_stray_result_is_duplicated() -> None:
    h = History()
    for key in ("twice", "two-results", "stray", "two-acks"):
        h.invoke(key, "c")
        h.ok(key, "c", f"j-{key}")
    h.ok("two-acks", "c", "j-other")
    got = verdicts(
        h,
        [
            done("j-twice", "twice"),
            done("j-twice-2", "twice"),
            done("j-two-results", "two-results", results=("a", "b")),
            done(
                "j-stray",
                "stray",
                results=("attempt-2/video.mp4",),
                stored=("attempt-1/video.mp4", "attempt-2/video.mp4"),
            ),
            done("j-two-acks", "two-acks"),
        ],
    )
    assert set(got.values()) == {Verdict.DUPLICATED}, got


def test_held_as_another_id_than_acknowledged_is_duplicated() -> None:
    h = History()
    h.invoke("k", "c")
    h.ok("k", "c", "j1")
    assert verdicts(h, [done("j2", "k")]) == {"k": Verdict.DUPLICATED}


def test_never_submitted_or_refused_but_held_is_unexpected() -> None:
    h = History()
    h.invoke("refused", "c")
    h.fail("refused", "c", "422")
    got = verdicts(h, [done("j-x", "phantom"), done("j-r", "refused"), done("j-none", None)])  # type: ignore[arg-type]
    assert got == {"phantom": Verdict.UNEXPECTED, "refused": Verdict.UNEXPECTED, "?": Verdict.UNEXPECTED}


def test_indeterminate_submits_may_go_either_way() -> None:
    h = History()
    for key in ("maybe-held", "maybe-not"):
        h.invoke(key, "c")
        h.info(key, "c", "connection reset")
    h.invoke("refused", "c")
    h.fail("refused", "c", "400")
    report = check(h, [done("j1", "maybe-held")])
    assert report.ok, report.summary()


def test_retries_with_the_same_key_are_one_job() -> None:
    h = History()
    h.invoke("k", "c")
    h.info("k", "c", "503")
    h.invoke("k", "c")
    h.ok("k", "c", "j1")
    h.invoke("k", "c")
    h.ok("k", "c", "j1")
    assert check(h, [done("j1", "k")]).ok


def test_a_missing_result_object_is_lost_and_unchecked_results_pass() -> None:
    h = History()
    h.invoke("k", "c")
    h.ok("k", "c", "j1")
    assert verdicts(h, [done("j1", "k", stored=())]) == {"k": Verdict.LOST}
    assert check(h, [Observation("j1", "k", "success")], expected_status="success", results_per_job=None).ok


def test_a_restricted_history_checks_one_kind_of_job() -> None:
    h = History()
    for key in ("video", "ci"):
        h.invoke(key, "c")
        h.ok(key, "c", f"j-{key}")
    assert not check(h, [done("j-video", "video")]).ok
    assert check(h.restricted(["video"]), [done("j-video", "video")]).ok
