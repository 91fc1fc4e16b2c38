"""Workflow commands in a job's output (``::error``/``::warning``/``::notice``, groups,
``::stop-commands::``, ``::save-state``, ``::add-mask::``), table-driven through the real
masker that reads them from the stream, split at every byte where it matters; and one end to
end run through the real stack where a job tries to use ``::stop-commands::`` to unmask a secret.
"""

from __future__ import annotations

import random

import pytest

from actions_language.commands import (
    MAX_MESSAGE,
    MAX_PER_ATTEMPT,
    MAX_PER_LEVEL_PER_STEP,
    WorkflowCommands,
    parse_command,
)
from actions_language.masking import StreamMasker, secret_forms
from tests.ci_core.conftest import CIStack
from workflows.ci.types.job import Annotation, AnnotationLevel
from workflows.ci.types.run import RunStatus

SECRET = "s3cr:et,value-9911"


def feed(pieces: list[bytes], secrets: tuple[str, ...] = ()) -> tuple[str, WorkflowCommands]:
    """Feed ``pieces`` through a masker with commands on; what it ships, and the commands."""
    masker: StreamMasker
    commands = WorkflowCommands(lambda text: masker.mask_text(text))
    masker = StreamMasker(secrets, commands=commands)
    out = b"".join(masker.feed(p) for p in pieces) + masker.flush()
    return out.decode(), commands


def run(output: bytes, secrets: tuple[str, ...] = (), pieces: int = 0) -> tuple[str, WorkflowCommands]:
    """Feed ``output`` (in ``pieces``-byte pieces; 0: whole) through a masker with commands on."""
    step = pieces or len(output) or 1
    return feed([output[i : i + step] for i in range(0, len(output), step)], secrets)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("::error::boom", ("error", {}, "boom")),
        ("  ::warning file=a.py,line=3::careful", ("warning", {"file": "a.py", "line": "3"}, "careful")),
        ("::NOTICE title=T::n", ("notice", {"title": "T"}, "n")),
        # GitHub's escapes: %25 last, so %250A stays the text %0A.
        ("::error::a%0Ab%0Dc%25d%250A", ("error", {}, "a\nb\rc%d%0A")),
        ("::error title=a%3Ab%2Cc%25::m%3A", ("error", {"title": "a:b,c%"}, "m%3A")),
        ("::error file=x,bogus,line=2::m", ("error", {"file": "x", "line": "2"}, "m")),
        ("::group::Build things", ("group", {}, "Build things")),
        ("::endgroup::", ("endgroup", {}, "")),
        ("no command", None),
        ("::no-end", None),
        (":::: empty name", None),
    ],
)
def test_parse_command(line: str, expected: tuple[str, dict[str, str], str] | None) -> None:
    assert parse_command(line) == expected


def ann(level: str, message: str, step: int = 0, **props: object) -> Annotation:
    return Annotation(level=AnnotationLevel(level), message=message, step=step, **props)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("output", "annotations"),
    [
        (
            "::error file=src/app.py,line=10,col=4,endLine=12,endColumn=9,title=Bad thing::it broke\n",
            [
                ann(
                    "error",
                    "it broke",
                    file="src/app.py",
                    line=10,
                    column=4,
                    end_line=12,
                    end_column=9,
                    title="Bad thing",
                )
            ],
        ),
        ("::warning::w1\n::notice::n1\n", [ann("warning", "w1"), ann("notice", "n1")]),
        # Multi-line message through %0A; numbers that are not numbers are dropped.
        ("::error line=x,col=-1::a%0Ab\n", [ann("error", "a\nb")]),
        # Not at a line start: not a command.
        ("echo ::error::nope\n", []),
        # ::debug, groups and unknown commands make no annotation.
        ("::debug::d\n::group::g\n::endgroup::\n::frobnicate::x\n", []),
        # Commands are off between ::stop-commands::TOKEN and ::TOKEN::, then on again.
        ("::stop-commands::tok1\n::error::hidden\n::tok1::\n::error::shown\n", [ann("error", "shown")]),
        # A wrong token does not resume.
        ("::stop-commands::tok2\n::other::\n::error::hidden\n", []),
        # The last line without a newline still counts when the stream ends.
        ("::notice::last", [ann("notice", "last")]),
    ],
)
@pytest.mark.parametrize("pieces", [0, 1, 7])
def test_annotations(output: str, annotations: list[Annotation], pieces: int) -> None:
    _, commands = run(output.encode(), pieces=pieces)
    assert commands.step_annotations(0) == annotations


def test_annotations_are_bounded_per_level_per_step_and_per_attempt() -> None:
    masker: StreamMasker
    commands = WorkflowCommands(lambda text: masker.mask_text(text))
    masker = StreamMasker(commands=commands)
    for step in range(10):
        commands.begin_step(step)
        lines = "".join(f"::{lvl}::{lvl}-{i}-{'x' * 2000}\n" for lvl in ("error", "warning") for i in range(30))
        masker.feed(lines.encode())
    masker.flush()
    per_step = [commands.step_annotations(s) for s in range(10)]
    assert sum(len(a) for a in per_step) == MAX_PER_ATTEMPT
    for anns in per_step:
        for level in ("error", "warning"):
            assert sum(a.level == level for a in anns) <= MAX_PER_LEVEL_PER_STEP
        assert all(len(a.message) <= MAX_MESSAGE for a in anns)


@pytest.mark.parametrize(
    "line",
    [
        f"::error::{SECRET}",
        f"::error title={SECRET.replace(':', '%3A').replace(',', '%2C')}::t",
        # Escapes cannot rebuild a secret in clear: decoding comes before the masking.
        f"::warning file={SECRET.replace(':', '%3A').replace(',', '%2C')}::{SECRET.replace(':', '%3A')}",
        f"::notice::{SECRET[:5]}%25{SECRET[5:]}",
    ],
)
def test_a_secret_never_reaches_an_annotation_in_clear(line: str) -> None:
    out, commands = run((line + "\n").encode(), secrets=(SECRET,))
    for a in commands.step_annotations(0):
        for text in (a.message, a.title or "", a.file or ""):
            assert SECRET not in text, a
    for form in secret_forms(SECRET):
        assert form.decode() not in out


def test_a_secret_split_by_property_commas_leaves_no_piece_behind() -> None:
    _, commands = run(f"::error title={SECRET},file={SECRET}::{SECRET}\n".encode(), secrets=(SECRET,))
    assert commands.step_annotations(0) == [ann("error", "***", title="***", file="***")]


def test_a_mask_added_after_an_annotation_still_masks_it() -> None:
    _, commands = run(b"::error::late-secret-123 leaked\n::add-mask::late-secret-123\n")
    assert commands.step_annotations(0) == [ann("error", "*** leaked")]


@pytest.mark.parametrize("pieces", [0, 1, 5])
def test_stop_commands_cannot_unmask_a_secret(pieces: int) -> None:
    output = (
        "::add-mask::runtime-val-42\n"
        "::stop-commands::pause\n"
        # Known values stay masked while commands are stopped...
        f"known {SECRET} and runtime-val-42\n"
        # ...but a new ::add-mask:: does nothing (as on GitHub), and no annotation is made.
        "::add-mask::while-stopped-77\n"
        f"::error::{SECRET}\n"
        "::pause::\n"
        "::add-mask::after-resume-88\n"
        "after-resume-88 gone\n"
    ).encode()
    out, commands = run(output, secrets=(SECRET,), pieces=pieces)
    assert SECRET not in out and "runtime-val-42" not in out and "after-resume-88" not in out, out
    assert "known *** and ***" in out
    assert "::add-mask::while-stopped-77" in out
    assert commands.step_annotations(0) == []
    assert not commands.stopped


def test_stop_commands_and_groups_end_with_the_step() -> None:
    masker: StreamMasker
    commands = WorkflowCommands(lambda text: masker.mask_text(text))
    masker = StreamMasker(commands=commands)
    masker.feed(b"::stop-commands::never-resumed\n::group::open\n")
    commands.begin_step(1)
    masker.feed(b"::error::in the next step\n")
    masker.flush()
    assert commands.step_annotations(1) == [ann("error", "in the next step", step=1)]


def test_save_state_is_kept_per_step_and_bounded() -> None:
    _, commands = run(b"::save-state name=pid::1234\n::save-state name=pid::5678\n::save-state::no-name\n")
    assert commands.state == {0: {"pid": "5678"}}


def test_a_line_whose_start_was_shipped_is_not_a_command() -> None:
    masker: StreamMasker
    commands = WorkflowCommands(lambda text: masker.mask_text(text))
    masker = StreamMasker(commands=commands)
    masker.feed(b"prefix without newline ")
    masker.feed(b"::error::not at a line start\n::notice::at a line start\n")
    masker.flush()
    assert commands.step_annotations(0) == [ann("notice", "at a line start")]


WORKFLOW = """
name: commands
on: push
jobs:
  annotate:
    runs-on: linux
    steps:
      - name: annotations and groups
        run: |
          echo "::group::Compile"
          echo "inside the group"
          echo "::endgroup::"
          echo "::error file=src/main.c,line=7,col=3,title=Compile error::undefined symbol"
          echo "::warning::careful%0Asecond line"
          echo "::notice title=Note::fyi"
          echo "::debug::debugging"
      - name: stop-commands cannot unmask
        run: |
          echo "::add-mask::runtime-secret-4711"
          echo "::stop-commands::sToP"
          echo "value: runtime-secret-4711"
          echo "::error::runtime-secret-4711 in an annotation"
          echo "::sToP::"
          echo "::notice::resumed runtime-secret-4711"
          printf '::warning::no newline at the end'
      - name: next step
        run: echo "::notice::from step three"
"""


async def test_annotations_groups_and_stop_commands_end_to_end(ci_stack: CIStack) -> None:
    repo = ci_stack.repo("commands")
    sha = repo.commit({".github/workflows/c.yml": WORKFLOW})
    push = await ci_stack.push(repo, sha)
    state = await ci_stack.wait_run(push.runs[0].run_id)
    assert state.status == RunStatus.SUCCESS, state
    job = state.job("annotate")
    assert job is not None
    attempt = job.current_attempt()
    assert attempt is not None
    steps = attempt.steps
    assert [(a.level, a.message, a.file, a.line, a.column, a.title) for a in steps[0].annotations] == [
        ("error", "undefined symbol", "src/main.c", 7, 3, "Compile error"),
        ("warning", "careful\nsecond line", None, None, None, None),
        ("notice", "fyi", None, None, None, "Note"),
    ]
    assert [(a.level, a.message, a.step) for a in steps[1].annotations] == [
        ("notice", "resumed ***", 1),
        ("warning", "no newline at the end", 1),
    ]
    assert [(a.level, a.message, a.step) for a in steps[2].annotations] == [("notice", "from step three", 2)]
    text = ci_stack.log_text(attempt.log_prefix)
    assert "runtime-secret-4711" not in text, text
    assert "::group::Compile\ninside the group\n::endgroup::" in text
    assert "value: ***" in text


def test_any_split_of_the_stream_reads_the_same_commands() -> None:
    """The masker's held tail and scan position must make every split read each line once."""
    rng = random.Random(1312)
    body = (
        "x" * 70_000
        + "\n::error::after a long line\nplain\n::add-mask::mask-me-5150\n::stop-commands::T\n::error::no\n"
        + "::add-mask::not-masked-4242\n::T::\n::warning title=a%2Cb::mask-me-5150 w\n  ::notice::indented\n"
        + "tail without newline ::error::no"
    ).encode()
    whole_out, whole = run(body, secrets=(SECRET,))
    expected = whole.step_annotations(0)
    assert [a.message for a in expected] == ["after a long line", "*** w", "indented"]
    assert "not-masked-4242" in whole_out and "mask-me-5150" not in whole_out
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(body)), 25))
        out, commands = feed([body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)], (SECRET,))
        assert commands.step_annotations(0) == expected
        assert out == whole_out


def test_set_output_is_honoured_with_githubs_deprecation_warning_once_per_step() -> None:
    commands = WorkflowCommands(lambda text: text.replace("s3cret", "***"))
    commands.begin_step(0)
    for line in (b"::set-output name=a::one", b"::set-output name=b::s3cret", b"::set-output name=a::two"):
        assert commands.line(line)
    commands.begin_step(1)
    commands.line(b"::save-state name=x::kept")
    assert commands.step_outputs(0) == {"a": "two", "b": "***"}
    assert commands.step_outputs(1) == {}
    assert commands.state[1] == {"x": "kept"}
    first = commands.step_annotations(0)
    assert [a.level for a in first] == [AnnotationLevel.WARNING]
    assert first[0].message.startswith("The `set-output` command is deprecated and will be disabled soon.")
    assert "`save-state`" in commands.step_annotations(1)[0].message
