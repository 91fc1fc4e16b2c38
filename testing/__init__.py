"""Tooling that tests and benchmarks share: the embedded stack launcher, the history checker
and the process harness. Not product code: nothing outside ``tests/`` and ``bench/`` imports it.
"""
