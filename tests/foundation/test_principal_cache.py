"""The principal cache: hits for a moment only, never misses, bounded."""

from __future__ import annotations

import time

from api.principal_cache import PrincipalCache
from leasehold.records.api_keys import Principal

ALICE = Principal(tenant_id="t", user_id="alice", tier="paid", key_id="k1")


def test_a_valid_key_is_trusted_for_its_ttl_only() -> None:
    cache = PrincipalCache(ttl_seconds=0.2)
    assert cache.get("lh_a") is None
    cache.put("lh_a", ALICE)
    assert cache.get("lh_a") == ALICE
    assert cache.get("lh_b") is None
    time.sleep(0.25)
    assert cache.get("lh_a") is None


def test_zero_ttl_keeps_nothing() -> None:
    cache = PrincipalCache(ttl_seconds=0)
    cache.put("lh_a", ALICE)
    assert cache.get("lh_a") is None


def test_the_cache_is_bounded_and_drops_the_oldest() -> None:
    cache = PrincipalCache(ttl_seconds=60, max_entries=3)
    for i in range(5):
        cache.put(f"lh_{i}", ALICE)
    assert [cache.get(f"lh_{i}") for i in range(5)] == [None, None, ALICE, ALICE, ALICE]
