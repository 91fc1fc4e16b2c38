"""The streaming masker: every form of a secret becomes ``***`` however the output is split."""

from __future__ import annotations

import base64
import json
import random
from urllib.parse import quote, quote_plus

import pytest

from actions_language.masking import MASK, StreamMasker, secret_forms

SECRET = "s3cr3t-Value/with+chars&more"
MULTILINE = "-----BEGIN KEY-----\nAAAAbbbbCCCCdddd\neeeeFFFFgggg\n-----END KEY-----"


def stream(masker: StreamMasker, pieces: list[bytes]) -> bytes:
    out = b"".join(masker.feed(p) for p in pieces)
    return out + masker.flush()


def random_splits(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), k=min(len(data) - 1, rng.randint(1, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_plain_value_is_masked() -> None:
    out = stream(StreamMasker([SECRET]), [f"token={SECRET} done\n".encode()])
    assert out == b"token=*** done\n"


@pytest.mark.parametrize(
    "form",
    [
        quote(SECRET, safe=""),
        quote_plus(SECRET, safe=""),
        json.dumps(SECRET)[1:-1],
        json.dumps('a"quoted\\' + SECRET)[1:-1],
    ],
)
def test_encoded_forms_are_masked(form: str) -> None:
    masker = StreamMasker([SECRET, 'a"quoted\\' + SECRET])
    out = stream(masker, [f"[{form}]\n".encode()])
    assert SECRET.encode() not in out
    assert form.encode() not in out
    assert MASK in out


@pytest.mark.parametrize("prefix", [b"", b"x", b"xy", b"user:", b"Authorization: Basic "])
def test_base64_at_every_alignment(prefix: bytes) -> None:
    encoded = base64.b64encode(prefix + SECRET.encode() + b"!trailer")
    masker = StreamMasker([SECRET])
    out = stream(masker, [b"header " + encoded + b" end\n"])
    # What is left of the encoding cannot spell more than a few characters of the secret.
    assert base64.b64encode(SECRET.encode())[4:-4] not in out
    for form in secret_forms(SECRET):
        assert form not in out
    assert MASK in out


def test_url_safe_base64() -> None:
    value = "\xff\xfe binary-ish secret ~~~???"
    encoded = base64.urlsafe_b64encode(value.encode())
    out = stream(StreamMasker([value]), [encoded])
    assert out.count(MASK) >= 1
    assert encoded[4:-4] not in out


def test_each_line_of_a_multiline_secret() -> None:
    masker = StreamMasker([MULTILINE])
    out = stream(masker, [b"only the second line: AAAAbbbbCCCCdddd\n", MULTILINE.encode() + b"\n"])
    assert b"AAAAbbbbCCCCdddd" not in out
    assert b"eeeeFFFFgggg" not in out
    assert out.startswith(b"only the second line: ***\n")


def test_short_lines_of_a_multiline_secret_are_not_masked_alone() -> None:
    masker = StreamMasker(["ab\nlong-enough-line"])
    assert stream(masker, [b"ab cd long-enough-line\n"]) == b"ab cd ***\n"


def test_split_across_writes_byte_by_byte() -> None:
    data = f"before {SECRET} after {SECRET}{SECRET}\n".encode()
    out = stream(StreamMasker([SECRET]), [bytes([b]) for b in data])
    assert out == b"before *** after ***\n"


def test_random_splits_match_one_shot_masking() -> None:
    rng = random.Random(7)
    secrets = [SECRET, MULTILINE, "overlap-secret-xyz", "secret-xyz-tail"]
    body = "\n".join(
        [
            f"a {SECRET} b",
            f"c {quote(SECRET, safe='')} d",
            base64.b64encode(b"q" + SECRET.encode()).decode(),
            MULTILINE,
            "overlap-secret-xyz-tail and secret-xyz-tail",
            json.dumps({"k": SECRET}),
            "nothing secret here: s3cr3t-Valu",
        ]
    ).encode()
    whole = StreamMasker(secrets).mask_text(body.decode()).encode()
    for form in set().union(*(secret_forms(s) for s in secrets)):
        assert form not in whole
    assert b"nothing secret here: s3cr3t-Valu" in whole
    for _ in range(300):
        out = stream(StreamMasker(secrets), random_splits(body, rng))
        assert out == whole


def test_holds_back_only_possible_prefixes() -> None:
    masker = StreamMasker([SECRET])
    # No byte here can start the secret: everything ships at once.
    assert masker.feed(b"hello world\n") == b"hello world\n"
    # "s3c" may be the start of the secret: held until it is known.
    assert masker.feed(b"next s3c") == b"next "
    assert masker.feed(b"ond\n") == b"s3cond\n"


def test_add_mask_command_masks_later_and_held_output() -> None:
    masker = StreamMasker()
    out = masker.feed(b"::add-mask::runtime-value-42\n")
    out += masker.feed(b"value is runtime-value-42\n")
    out += masker.flush()
    assert b"runtime-value-42" not in out
    assert out == b"::add-mask::***\nvalue is ***\n"


def test_add_mask_command_split_across_writes() -> None:
    masker = StreamMasker()
    pieces = [b"x\n::add-", b"mask::split-", b"value-99", b"\nsplit-value-99 again\n"]
    out = stream(masker, pieces)
    assert b"split-value-99" not in out
    assert b"value-99" not in out
    assert out == b"x\n::add-mask::***\n*** again\n"


def test_add_mask_with_indentation_and_crlf() -> None:
    out = stream(StreamMasker(), [b"  ::add-mask::indented-secret\r\nindented-secret\n"])
    assert b"indented-secret" not in out


def test_reveals_secret_and_mask_text() -> None:
    masker = StreamMasker([SECRET])
    assert masker.reveals_secret(f"x{quote(SECRET, safe='')}y")
    assert not masker.reveals_secret("harmless")
    assert masker.mask_text(f"e: {SECRET}") == "e: ***"
