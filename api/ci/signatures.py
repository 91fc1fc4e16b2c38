"""GitHub's webhook signature, shared by the webhook router and the tests that sign deliveries."""

from __future__ import annotations

import hashlib
import hmac


def signature_of(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: what GitHub sends in ``X-Hub-Signature-256``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
