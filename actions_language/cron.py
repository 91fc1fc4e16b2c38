"""``on.schedule`` cron expressions as GitHub reads them: five fields (minute, hour, day of the
month, month, day of the week), UTC, with ``*``, ``,``, ``-``, ``/``, month and weekday names
(``JAN``, ``MON``), and weekday 7 as Sunday. GitHub runs a schedule at most once every five
minutes: ``every_five_minutes`` thins the minute field so that no two fire times of an hour (or
of two hours in a row) are closer than that."""

from __future__ import annotations

import re

# GitHub's shortest interval between two runs of a scheduled workflow.
MIN_INTERVAL_MINUTES = 5
MAX_CRON_LENGTH = 100
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of the month", 1, 31), ("month", 1, 12), ("day of the week", 0, 7))
_NAMES = {
    3: {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
    4: {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())},
}
_PART = re.compile(r"^(\*|[0-9A-Za-z]+(?:-[0-9A-Za-z]+)?)(?:/([0-9]+))?$")


class CronError(ValueError):
    """Why a cron expression is not one GitHub runs."""


def _value(text: str, index: int) -> int:
    names = _NAMES.get(index, {})
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit():
        raise CronError(f"{_FIELDS[index][0]}: {text!r} is not a number" + (" or a name" if names else ""))
    return int(text)


def field_values(text: str, index: int) -> set[int]:
    """The values one field matches (``CronError`` naming the field when it is not valid)."""
    name, low, high = _FIELDS[index]
    found: set[int] = set()
    for part in text.split(","):
        match = _PART.match(part)
        if match is None:
            raise CronError(f"{name}: {part!r} is not a value, range, list or step")
        base, step_text = match.groups()
        step = int(step_text) if step_text else 1
        if step < 1:
            raise CronError(f"{name}: the step must be at least 1")
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, last = base.split("-", 1)
            start, end = _value(first, index), _value(last, index)
        else:
            start = _value(base, index)
            end = high if step_text else start
        if not (low <= start <= high and low <= end <= high) or start > end:
            raise CronError(f"{name}: {part!r} is outside {low}-{high}")
        found.update(range(start, end + 1, step))
    return found


def parse_cron(text: str) -> list[str]:
    """The five fields of ``text``, each checked; ``CronError`` says which is wrong."""
    if len(text) > MAX_CRON_LENGTH:
        raise CronError(f"at most {MAX_CRON_LENGTH} characters")
    fields = text.split()
    if len(fields) != 5:
        raise CronError(f"must have five fields (minute hour day month weekday), not {len(fields)}")
    for index, field in enumerate(fields):
        field_values(field, index)
    return fields


def every_five_minutes(text: str) -> str:
    """``text`` with its minute field thinned to GitHub's shortest interval (UTC)."""
    fields = parse_cron(text)
    minutes = sorted(field_values(fields[0], 0))
    kept: list[int] = []
    for minute in minutes:
        if not kept or minute - kept[-1] >= MIN_INTERVAL_MINUTES:
            kept.append(minute)
    # The hour's last fire time and the next hour's first must be far enough apart too.
    hours = field_values(fields[1], 1)
    if len(kept) > 1 and kept[0] + 60 - kept[-1] < MIN_INTERVAL_MINUTES and any((h + 1) % 24 in hours for h in hours):
        kept.pop()
    if kept == minutes:
        return " ".join(fields)
    return " ".join([",".join(str(m) for m in kept), *fields[1:]])
