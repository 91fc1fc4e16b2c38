"""The run listing's cursor: opaque, round-trips the position it names, and anything else is a
400 naming ``after`` (never a 500)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from api.ci.runs import decode_cursor, encode_cursor
from api.errors import ApiError
from leasehold.records.ci.runs import RunCursor

RUN = "run_" + "ab" * 16


def test_a_cursor_names_the_position_it_was_made_from() -> None:
    cursor = RunCursor(datetime(2026, 12, 1, 9, 30, 1, 123456, tzinfo=UTC), RUN)
    assert decode_cursor(encode_cursor(cursor)) == cursor
    # SQLite hands back naive UTC times: the cursor made from one names the same instant.
    naive = RunCursor(cursor.created_at.replace(tzinfo=None), RUN)
    assert decode_cursor(encode_cursor(naive)) == cursor


@pytest.mark.parametrize(
    "value",
    [
        "garbage!",
        "",
        encode_cursor(RunCursor(datetime(2026, 12, 1, tzinfo=UTC), "not-a-run")),
        "bm90IGEgY3Vyc29y",  # "not a cursor"
        "//79",  # not UTF-8
    ],
)
def test_anything_else_is_a_400_naming_after(value: str) -> None:
    with pytest.raises(ApiError) as raised:
        decode_cursor(value)
    assert raised.value.status == 400 and raised.value.param == "after"
