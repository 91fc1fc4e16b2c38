"""GitHub's workflow commands in a job's output: ``::error``, ``::warning``, ``::notice``,
``::group``/``::endgroup``, ``::debug``, ``::save-state``, ``::set-output`` and ``::stop-commands``.

The log's ``StreamMasker`` hands every complete output line that starts with ``::`` here, raw
and in order, and asks whether commands are on for it; ``::add-mask::`` itself stays with the
masker. Between ``::stop-commands::TOKEN`` and ``::TOKEN::`` no command is processed,
``::add-mask::`` included (as on GitHub), but masking of every value already known goes on: the
masker masks bytes, not commands, so stopping commands can never unmask a secret.

The line is masked before it is split into properties (a secret holding ',' cannot leave a
piece of itself in one), and the decoded texts are masked again when recorded and when the
step ends (with every value known then): GitHub's escapes (``%3A``) cannot smuggle a secret
into an annotation in clear. They travel in the run state, so they are
bounded: per level per step, per attempt, and in length.

Groups, ``::debug::`` and unknown commands stay in the log as they are (a reader folds groups).
``::set-output`` and ``::save-state`` work as GitHub still lets them (old releases of
``@actions/core`` print them), each with GitHub's deprecation warning as an annotation, once per
step; a ``$GITHUB_OUTPUT`` value of the same name wins. The disabled ``::set-env``/``::add-path``
are refused by the parser when a ``run:`` holds them literally; printed any other way they do
nothing, as on GitHub.
"""

from __future__ import annotations

from collections.abc import Callable

from workflows.ci.types.job import Annotation, AnnotationLevel

# GitHub keeps 10 error and 10 warning annotations per step, 50 per job.
MAX_PER_LEVEL_PER_STEP = 10
MAX_PER_ATTEMPT = 50
MAX_MESSAGE = 512
MAX_TITLE = 128
MAX_FILE = 256
# At most this many ``::save-state`` values per step, each at most this long.
MAX_STATE_VALUES = 64
MAX_STATE_VALUE = 4096

_LEVELS = {level.value: level for level in AnnotationLevel}
# At most this many ``::set-output`` values per step (as ``::save-state``), each at most 1 MiB
# (``$GITHUB_OUTPUT``'s own bound is the file's).
MAX_OUTPUT_VALUE = 1 << 20
# GitHub's words, as its runner prints them.
DEPRECATED = (
    "The `{0}` command is deprecated and will be disabled soon. Please upgrade to using Environment Files. "
    "For more information see: "
    "https://github.blog/changelog/2022-10-11-github-actions-deprecating-save-state-and-set-output-commands/"
)


def unescape_data(text: str) -> str:
    """A command's message: ``%0D``, ``%0A`` then ``%25`` (so ``%250A`` stays ``%0A``)."""
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(text: str) -> str:
    """A command's property value: also ``%3A`` (':') and ``%2C`` (',')."""
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def parse_command(line: str) -> tuple[str, dict[str, str], str] | None:
    """``::name k=v,k=v::message`` as (lower-case name, decoded properties, decoded message)."""
    line = line.strip()
    if not line.startswith("::"):
        return None
    end = line.find("::", 2)
    if end == -1:
        return None
    head, message = line[2:end], line[end + 2 :]
    name, _, props_text = head.partition(" ")
    if not name:
        return None
    props: dict[str, str] = {}
    for part in props_text.split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            props[key.strip()] = unescape_property(value)
    return name.lower(), props, unescape_data(message)


def _int(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit() or len(value.strip()) > 9:
        return None
    return int(value.strip()) or None


class WorkflowCommands:
    """Workflow commands of one job attempt; ``mask`` masks text with every value known now."""

    def __init__(self, mask: Callable[[str], str]) -> None:
        self._mask = mask
        self.step = 0
        self._stop_token: str | None = None
        self._group_depth = 0
        self.annotations: dict[int, list[Annotation]] = {}
        self._total = 0
        # ``::save-state`` values by step (for that step's post step; never leave the worker).
        self.state: dict[int, dict[str, str]] = {}
        # ``::set-output`` values by step.
        self.outputs: dict[int, dict[str, str]] = {}
        self._warned: set[tuple[int, str]] = set()

    @property
    def stopped(self) -> bool:
        return self._stop_token is not None

    def begin_step(self, index: int) -> None:
        """Commands of a new step: stop-commands and open groups do not carry over."""
        self.step = index
        self._stop_token = None
        self._group_depth = 0

    def line(self, raw: bytes) -> bool:
        """Handle one complete output line starting with ``::``; whether commands are on for it
        (the masker processes ``::add-mask::`` only then)."""
        # Masked before it is split: a secret holding ',' or '=' must not leave a piece of
        # itself in a property.
        text = self._mask(raw.decode(errors="replace")).strip()
        if self._stop_token is not None:
            if text == f"::{self._stop_token}::":
                self._stop_token = None
            return False
        parsed = parse_command(text)
        if parsed is None:
            return True
        name, props, message = parsed
        if name == "stop-commands":
            token = message.strip()
            if token:
                self._stop_token = token
            return False
        if name in _LEVELS:
            self._annotate(_LEVELS[name], props, message)
        elif name == "group":
            self._group_depth += 1
        elif name == "endgroup":
            self._group_depth = max(0, self._group_depth - 1)
        elif name == "save-state":
            self._deprecated(name)
            self.save_state(self.step, props.get("name", ""), message)
        elif name == "set-output":
            self._deprecated(name)
            values = self.outputs.setdefault(self.step, {})
            key = props.get("name", "")
            if key and (key in values or len(values) < MAX_STATE_VALUES):
                values[key] = message[:MAX_OUTPUT_VALUE]
        return True

    def _deprecated(self, command: str) -> None:
        if (self.step, command) not in self._warned:
            self._warned.add((self.step, command))
            self._annotate(AnnotationLevel.WARNING, {}, DEPRECATED.format(command))

    def step_outputs(self, index: int) -> dict[str, str]:
        """The step's ``::set-output`` values."""
        return dict(self.outputs.get(index, {}))

    def _annotate(self, level: AnnotationLevel, props: dict[str, str], message: str) -> None:
        step = self.annotations.setdefault(self.step, [])
        if self._total >= MAX_PER_ATTEMPT or sum(a.level == level for a in step) >= MAX_PER_LEVEL_PER_STEP:
            return
        title = props.get("title")
        file = props.get("file")
        # Kept whole until ``step_annotations``: cutting before the last masking could leave the
        # start of a secret that becomes known later.
        step.append(
            Annotation(
                level=level,
                message=self._mask(message),
                title=self._mask(title) if title else None,
                file=self._mask(file) if file else None,
                line=_int(props.get("line")),
                end_line=_int(props.get("endLine")),
                column=_int(props.get("col")),
                end_column=_int(props.get("endColumn")),
                step=self.step,
            )
        )
        self._total += 1

    def save_state(self, step: int, name: str, value: str) -> None:
        """``::save-state`` or a ``$GITHUB_STATE`` line of ``step`` (bounded)."""
        values = self.state.setdefault(step, {})
        if name and (name in values or len(values) < MAX_STATE_VALUES):
            values[name] = value[:MAX_STATE_VALUE]

    def step_annotations(self, index: int) -> list[Annotation]:
        """The step's annotations, masked again with every value known now (a secret added
        after an annotation was printed still does not show in it)."""
        return [
            a.model_copy(
                update={
                    "message": self._mask(a.message)[:MAX_MESSAGE],
                    "title": self._mask(a.title)[:MAX_TITLE] if a.title else None,
                    "file": self._mask(a.file)[:MAX_FILE] if a.file else None,
                }
            )
            for a in self.annotations.get(index, [])
        ]
