"""The Standard Webhooks signature (https://www.standardwebhooks.com/), both sides of it.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}``; the signature is
``v1,<base64 HMAC-SHA256>`` keyed with the base64-decoded part of the ``whsec_<base64>``
secret; the timestamp is integer Unix seconds. A receiver checks the timestamp against its
clock (five minutes either way) to refuse replays.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
# How far a receiver lets the timestamp stray from its clock.
TOLERANCE_SECONDS = 5 * 60


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)


def sign(secret: str, webhook_id: str, timestamp: int, body: str | bytes) -> str:
    """The ``webhook-signature`` header value of one message."""
    payload = body.encode() if isinstance(body, str) else body
    content = f"{webhook_id}.{timestamp}.".encode() + payload
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def verify(secret: str, webhook_id: str, timestamp: str, signatures: str, body: bytes, now: float) -> bool:
    """Whether any signature in the (space-separated) header matches and the timestamp is fresh."""
    try:
        sent_at = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent_at) > TOLERANCE_SECONDS:
        return False
    expected = sign(secret, webhook_id, sent_at, body).encode()
    return any(hmac.compare_digest(expected, candidate.encode()) for candidate in signatures.split())
