"""Masking secret values in a job's output before any byte of it is stored or streamed.

Pure (no I/O) and streaming: ``StreamMasker.feed`` takes output in whatever pieces the job
wrote it and returns what is safe to ship now; it holds back only a tail that could still be the
start of a secret (at most the longest pattern minus one byte), so a value split across two
writes or two log chunks is still caught. ``flush`` releases the rest at the end.

Each secret expands into the forms it is likely to appear in: itself, each line of a
multi-line value, its base64 at the three byte alignments (the part of the encoding that does
not depend on neighbouring bytes, standard and URL-safe alphabets), its URL encodings and its
JSON-escaped form. Every occurrence of any form becomes ``***``; overlapping occurrences merge
into one.

``::add-mask::VALUE`` at the start of an output line adds VALUE at run time (GitHub's workflow
command); the line itself is shown as ``::add-mask::***``, never in clear. Every complete line
starting with ``::`` is seen exactly once, whole and in order (such a line is held until its
newline), and is offered first to the other workflow commands (``LineCommands``), which say
whether commands are on for it: after ``::stop-commands::`` they are not, and ``::add-mask::``
does nothing either, while every value already known stays masked.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import quote, quote_plus

MASK = b"***"
ADD_MASK = b"::add-mask::"
# Lines of a multi-line secret shorter than this are not masked on their own: masking every
# "}" or "-----" in a log would reveal more than it hides.
MIN_LINE_LENGTH = 4
# Forms shorter than this (e.g. the base64 of a short value at an awkward alignment) are skipped.
MIN_FORM_LENGTH = 4
# An ``::add-mask::`` line longer than this is taken as complete even without its newline.
MAX_COMMAND_LINE = 64 * 1024


def _b64_forms(value: bytes) -> set[bytes]:
    """The base64 text a value produces wherever it sits in a larger encoded byte string.

    With ``k`` bytes before it in its 3-byte group (k = 0, 1, 2), the first 0, 2 or 3 encoded
    characters also depend on those unknown bytes, and so do the last ones when the value does
    not end on a group boundary; what remains depends on the value alone.
    """
    forms: set[bytes] = set()
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + value)
        n = k + len(value)
        known = 4 * (n // 3) + (n % 3)
        skip = (0, 2, 3)[k]
        core = encoded[skip:known]
        if len(core) >= MIN_FORM_LENGTH:
            forms.add(core)
            forms.add(core.replace(b"+", b"-").replace(b"/", b"_"))
    return forms


def secret_forms(value: str) -> set[bytes]:
    """Every byte pattern that reveals ``value`` (see the module docstring)."""
    forms: set[bytes] = set()
    if not value:
        return forms
    raw = value.encode()
    candidates = [value]
    lines = [line.rstrip("\r") for line in value.split("\n")]
    if len(lines) > 1:
        candidates += [line for line in lines if len(line.strip()) >= MIN_LINE_LENGTH]
    for text in candidates:
        data = text.encode()
        forms.add(data)
        forms.add(quote(text, safe="").encode())
        forms.add(quote_plus(text, safe="").encode())
        forms.add(quote(text, safe="/:").encode())
        forms.add(json.dumps(text)[1:-1].encode())
        forms.add(json.dumps(text, ensure_ascii=False)[1:-1].encode())
    forms |= _b64_forms(raw)
    return {f for f in forms if len(f) >= MIN_FORM_LENGTH or f == raw}


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    intervals.sort()
    merged: list[tuple[int, int]] = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


COMMAND_START = b"::"


class LineCommands(Protocol):
    """The workflow commands other than ``::add-mask::`` (``actions_language.commands``)."""

    def line(self, raw: bytes) -> bool:
        """Handle one complete line starting with ``::``; whether commands are on for it."""
        ...


class StreamMasker:
    """Masks one stream (one job attempt's log). Not thread-safe: the caller serialises."""

    def __init__(
        self, secrets: Iterable[str] = (), handle_commands: bool = True, commands: LineCommands | None = None
    ) -> None:
        self._patterns: set[bytes] = set()
        self._longest = 0
        self._handle_commands = handle_commands
        self._commands = commands
        self._tail = bytearray()
        # How many bytes at the start of the tail were already scanned for commands, and
        # whether the tail starts a line (a line whose start was shipped is no command).
        self._scanned = 0
        self._line_start = True
        # The first ``_forced`` bytes of the tail belong to a match already partly shipped.
        self._forced = 0
        # The shipped output ended with a mask: a mask continuing from there adds no second "***".
        self._open = False
        for value in secrets:
            self.add(value)

    @property
    def patterns(self) -> frozenset[bytes]:
        return frozenset(self._patterns)

    def add(self, value: str) -> None:
        """Mask ``value`` (and its forms) from now on, including in output not yet shipped."""
        for form in secret_forms(value):
            self._patterns.add(form)
            self._longest = max(self._longest, len(form))

    def reveals_secret(self, text: str) -> bool:
        """Whether ``text`` holds any masked form (e.g. a job output that must not leave)."""
        data = text.encode()
        return any(p in data for p in self._patterns)

    def mask_text(self, text: str) -> str:
        """Mask a complete piece of text (not part of the stream)."""
        data = text.encode()
        return self._render(data, self._find(data), 0, len(data), False)[0].decode(errors="replace")

    # Streaming ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Take the next piece of output; returns the bytes that are safe to ship now."""
        if not data:
            return b""
        buf = bytes(self._tail) + data
        scanned = self._scan_commands(buf, final=False) if self._handle_commands else 0
        intervals = self._find(buf)
        cut = self._safe_cut(buf)
        return self._emit(buf, intervals, cut, scanned)

    def flush(self) -> bytes:
        """Everything still held, masked (end of the stream)."""
        buf = bytes(self._tail)
        if not buf:
            return b""
        if self._handle_commands:
            self._scan_commands(buf, final=True)
        out = self._emit(buf, self._find(buf), len(buf), len(buf))
        self._scanned, self._line_start = 0, True
        return out

    def _emit(self, buf: bytes, intervals: list[tuple[int, int]], cut: int, scanned: int) -> bytes:
        # What of the new tail was already scanned, and whether it starts a line.
        self._line_start = self._line_start if cut == 0 else buf[cut - 1 : cut] == b"\n"
        self._scanned = max(0, scanned - cut)
        if cut == 0:
            # Nothing is safe yet: hold it all, forced part and open mask included.
            self._tail = bytearray(buf)
            return b""
        if self._forced:
            intervals = _merge([*intervals, (0, self._forced)])
        out, ended_masked = self._render(buf, intervals, 0, cut, self._open)
        spanning = [end for start, end in intervals if start < cut < end]
        self._forced = max(spanning) - cut if spanning else 0
        # A mask that reaches the cut continues (or touches) what comes next: one "***".
        self._open = ended_masked
        self._tail = bytearray(buf[cut:])
        return out

    def _find(self, buf: bytes) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for pattern in self._patterns:
            start = buf.find(pattern)
            while start != -1:
                found.append((start, start + len(pattern)))
                start = buf.find(pattern, start + 1)
        return _merge(found)

    def _safe_cut(self, buf: bytes) -> int:
        """Where the held tail starts: the earliest position in the last ``longest - 1`` bytes
        from which the rest of ``buf`` is a proper prefix of some pattern (or of an
        ``::add-mask::`` line still being written)."""
        cut = len(buf)
        window = max(0, len(buf) - max(self._longest - 1, 0))
        for pattern in self._patterns:
            first = pattern[:1]
            pos = buf.find(first, window)
            while pos != -1 and pos < cut:
                if pattern.startswith(buf[pos:]):
                    cut = pos
                    break
                pos = buf.find(first, pos + 1)
        if self._handle_commands:
            line_start = buf.rfind(b"\n") + 1
            line = buf[line_start:].lstrip(b" \t")
            if (
                line
                and (line_start > 0 or self._line_start)
                and len(buf) - line_start < MAX_COMMAND_LINE
                and (COMMAND_START.startswith(line) or line.startswith(COMMAND_START))
            ):
                # A command line still being written is held whole until its newline.
                cut = min(cut, line_start)
        return cut

    def _scan_commands(self, buf: bytes, final: bool) -> int:
        """Handle each complete line of ``buf`` not handled before, in order (a mask added here
        applies to this very buffer); returns where the handled lines end."""
        start = self._scanned
        if start == 0 and not self._line_start:
            # The tail starts inside a line whose beginning was shipped: not a command.
            first = buf.find(b"\n")
            if first == -1:
                return len(buf) if final else 0
            start = first + 1
        if COMMAND_START not in buf[start:]:
            # No command anywhere (the common case): only where the complete lines end matters.
            return len(buf) if final else max(start, buf.rfind(b"\n") + 1)
        while start < len(buf):
            end = buf.find(b"\n", start)
            if end == -1:
                if not final and len(buf) - start < MAX_COMMAND_LINE:
                    return start
                end = len(buf)
            self._command_line(buf[start:end].strip(b" \t\r"))
            start = end + 1
        return len(buf)

    def _command_line(self, line: bytes) -> None:
        if not line.startswith(COMMAND_START):
            return
        if self._commands is not None and not self._commands.line(line):
            return
        if line.startswith(ADD_MASK):
            value = line[len(ADD_MASK) :].strip().decode(errors="replace")
            if value:
                # Whatever its length: the user asked for it, and the command line itself
                # must not show it.
                self._patterns.add(value.encode())
                self._longest = max(self._longest, len(value.encode()))
                self.add(value)

    def _render(
        self, buf: bytes, intervals: list[tuple[int, int]], start: int, stop: int, continuing: bool
    ) -> tuple[bytes, bool]:
        out = bytearray()
        pos = start
        ended_masked = False
        for a, b in intervals:
            if b <= pos or a >= stop:
                continue
            a = max(a, pos)
            out += buf[pos:a]
            if not (continuing and a == start):
                out += MASK
            pos = min(b, stop)
            ended_masked = pos == stop
        if pos < stop:
            out += buf[pos:stop]
            ended_masked = False
        return bytes(out), ended_masked
