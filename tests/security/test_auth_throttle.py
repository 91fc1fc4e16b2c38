"""The failed-authentication throttle on its own: rate, refill, per-address buckets, bounded memory."""

from __future__ import annotations

from api.auth_throttle import FailedAuthThrottle, client_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_n_failures_a_minute_then_429_until_a_token_returns() -> None:
    clock = Clock()
    throttle = FailedAuthThrottle(20, clock=clock)
    for _ in range(20):
        assert throttle.retry_after("10.0.0.1") is None
        throttle.record_failure("10.0.0.1")
    wait = throttle.retry_after("10.0.0.1")
    assert wait == 3  # one token back takes 60 s / 20
    assert throttle.retry_after("10.0.0.2") is None  # another address is not affected
    clock.now += wait
    assert throttle.retry_after("10.0.0.1") is None
    throttle.record_failure("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") is not None
    # A full minute refills the bucket, and a full bucket is forgotten.
    clock.now += 60
    assert throttle.retry_after("10.0.0.1") is None
    assert throttle.tracked() == 0


def test_memory_is_bounded_oldest_forgotten_first() -> None:
    throttle = FailedAuthThrottle(1, max_clients=100, clock=Clock())
    for i in range(1000):
        throttle.record_failure(f"10.0.{i // 256}.{i % 256}")
    assert throttle.tracked() == 100
    assert throttle.retry_after("10.0.0.0") is None  # forgotten
    assert throttle.retry_after("10.0.3.231") is not None  # the last one is still counted


def test_zero_turns_it_off() -> None:
    throttle = FailedAuthThrottle(0, clock=Clock())
    for _ in range(100):
        throttle.record_failure("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") is None and throttle.tracked() == 0


def test_ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:192.0.2.7") == client_key("192.0.2.7") == "192.0.2.7"
    assert client_key(None) == "unknown"
