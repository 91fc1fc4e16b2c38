"""Valid API keys' principals, kept for a moment in each API process.

A status read is mostly authentication: without this, every ``GET`` costs an API-key query
before the read-model query it came for. Only valid keys are kept (a wrong key is looked up
every time and counted by the failed-auth throttle), entries live ``ttl`` seconds (a revoked
key stops working within that, in every replica), and the cache is keyed by the key's hash and
bounded in size, so a flood of distinct valid keys cannot grow it without limit.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from leasehold.records.api_keys import Principal, key_hash

MAX_ENTRIES = 10_000


class PrincipalCache:
    """Key hash -> (principal, expiry); not thread-safe: used from the event loop only."""

    def __init__(self, ttl_seconds: float, max_entries: int = MAX_ENTRIES) -> None:
        self._ttl = ttl_seconds
        self._max = max_entries
        self._entries: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    def get(self, key: str) -> Principal | None:
        if self._ttl <= 0:
            return None
        ident = key_hash(key)
        entry = self._entries.get(ident)
        if entry is None:
            return None
        principal, expires = entry
        if time.monotonic() >= expires:
            del self._entries[ident]
            return None
        return principal

    def put(self, key: str, principal: Principal) -> None:
        if self._ttl <= 0:
            return
        ident = key_hash(key)
        self._entries[ident] = (principal, time.monotonic() + self._ttl)
        self._entries.move_to_end(ident)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
