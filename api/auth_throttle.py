"""Throttling of failed authentication per client address: a token bucket per address.

Every failed attempt (a wrong API key, a webhook signature that verifies against no
repository, a wrong metrics token) takes a token; tokens come back at the same rate per
minute as the bucket holds. An address with no token left is answered 429 with
``Retry-After``, and its credentials are not even checked, so guessing is slow. Successful
requests take nothing, and no address's failures affect another's.

The buckets live in this process: each API replica counts alone, so N replicas allow up to N
times the rate (still far too slow to guess a 256-bit key). Memory is bounded: at most
``max_clients`` addresses are tracked, and the least recently failing is forgotten first.
IPv6 clients are counted per /64, the block one subscriber usually holds.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

# Enough for every address seen during an attack on one replica, small enough to ignore (~2 MB).
MAX_TRACKED_CLIENTS = 10_000


@functools.lru_cache(maxsize=4096)
def client_key(host: str | None) -> str:
    """The bucket an address counts in: the address itself, or its /64 for IPv6 (asked on every
    authenticated request, hence remembered for the addresses seen last)."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class FailedAuthThrottle:
    """Token buckets of failed attempts, keyed by client address (thread-safe)."""

    def __init__(
        self,
        failures_per_minute: int,
        max_clients: int = MAX_TRACKED_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = float(failures_per_minute)
        self.rate = failures_per_minute / 60.0
        self.max_clients = max_clients
        self._clock = clock
        # key -> (tokens, when they were counted); oldest failure first.
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        # get_principal is a sync dependency, run on a thread pool.
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def _tokens(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.capacity, now))
        return min(self.capacity, tokens + (now - at) * self.rate)

    def retry_after(self, key: str) -> int | None:
        """Seconds until ``key`` may try again, or ``None`` when it may try now."""
        if not self.enabled:
            return None
        with self._lock:
            now = self._clock()
            tokens = self._tokens(key, now)
            if tokens >= 1.0:
                if tokens >= self.capacity:
                    self._buckets.pop(key, None)  # a full bucket is the same as none
                return None
            return max(1, math.ceil((1.0 - tokens) / self.rate))

    def record_failure(self, key: str) -> None:
        """Take a token from ``key``'s bucket."""
        if not self.enabled:
            return
        with self._lock:
            now = self._clock()
            self._buckets[key] = (max(0.0, self._tokens(key, now) - 1.0), now)
            self._buckets.move_to_end(key)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)

    def tracked(self) -> int:
        """How many addresses are tracked now."""
        with self._lock:
            return len(self._buckets)
