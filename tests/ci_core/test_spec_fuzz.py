"""The workflow parser raises nothing but ``WorkflowSpecError``, whatever the bytes.

A seeded generator builds thousands of hostile files: mutations of real workflows, random
YAML made of the constructs that broke parsers before (tags, anchors, huge and odd numbers,
deep nesting, binary, odd keys), and raw random bytes. Every error must still name the file.
"""

from __future__ import annotations

import os
import random

from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError

SEED = int(os.environ.get("LEASEHOLD_FUZZ_SEED", "1312"))

BASE = """name: CI
on:
  push:
    branches: [main]
env:
  A: 1
jobs:
  build:
    runs-on: linux
    timeout-minutes: 10
    if: ${{ github.ref == 'refs/heads/main' }}
    outputs:
      o: ${{ steps.s.outputs.o }}
    steps:
      - id: s
        run: echo "o=1" >> "$GITHUB_OUTPUT"
      - uses: actions/cache@v4
        with:
          key: k-${{ hashFiles('**/x') }}
          path: p
  test:
    needs: build
    runs-on: [linux]
    environment: prod
    steps:
      - run: echo ${{ needs.build.outputs.o }}
"""

# The job environment and what parses but does not run yet (defaults, strategy, concurrency,
# permissions, path filters, dispatch inputs).
BASE_JOBENV = """on:
  push:
    paths: ['src/**']
  workflow_dispatch:
    inputs:
      level: {type: choice, options: [a, b], default: a}
      n: {type: number, default: 1}
defaults:
  run:
    shell: sh
    working-directory: sub
concurrency: ci-${{ github.ref }}
permissions: {contents: read}
jobs:
  build:
    runs-on: linux
    defaults: {run: {shell: 'python3 {0}'}}
    concurrency: {group: g, cancel-in-progress: true}
    strategy:
      fail-fast: false
      max-parallel: 2
      matrix:
        os: [a, b]
        v: ${{ fromJSON('[1, 2]') }}
        include: [{os: a, x: 1}]
        exclude: [{os: b}]
    steps:
      - run: print(1)
        shell: bash
"""

SCALARS = [
    "1",
    "+" + "9" * 400,
    "9" * 5000,
    "-0",
    "0x1F",
    "0o17",
    "1e400",
    "-1e400",
    ".nan",
    ".inf",
    "1_000",
    "010",
    "true",
    "no",
    "null",
    "~",
    "''",
    '""',
    "!!bool test",
    "!!int x",
    "!!float y",
    "!!str 1",
    "!!binary AAAA",
    "!!timestamp 2020-01-01",
    "!!set {a}",
    "!!omap [a: 1]",
    "!!python/object:os.system x",
    "!custom 1",
    "&a 1",
    "*a",
    "${{ }}",
    "${{ github.sha",
    "${{ '}}' }}",
    "${{ " + "(" * 80 + "1" + ")" * 80 + " }}",
    "${{ fromJSON('{') }}",
    "${{ format('{9}') }}",
    "::set-output name=a::b",
    "é\u202e\u0000",
    "\ufeff",
    "a: b: c",
    "[",
    "{",
    "- ",
    "? a",
    "|",
    ">-",
    "%YAML 1.1",
    "---",
    "...",
    "\t",
    "defaults",
    "concurrency",
    "group",
    "cancel-in-progress",
    "permissions",
    "contents",
    "read-all",
    "include",
    "exclude",
    "fail-fast",
    "max-parallel",
    "workflow_dispatch",
    "inputs",
    "options",
    "paths-ignore",
    "__x",
    "MY-JOB",
]
KEYS = [
    "on",
    "jobs",
    "env",
    "name",
    "runs-on",
    "steps",
    "run",
    "uses",
    "with",
    "needs",
    "if",
    "timeout-minutes",
    "outputs",
    "environment",
    "strategy",
    "matrix",
    "services",
    "container",
    "id",
    "shell",
    "working-directory",
    "continue-on-error",
    "network",
    "push",
    "branches",
    "tags",
    "paths",
    "pull_request",
    "types",
    "defaults",
    "concurrency",
    "group",
    "cancel-in-progress",
    "permissions",
    "contents",
    "read-all",
    "include",
    "exclude",
    "fail-fast",
    "max-parallel",
    "workflow_dispatch",
    "inputs",
    "options",
    "paths-ignore",
    "__x",
    "a-b",
    "'a=b'",
    "1",
    "true",
    "null",
    "[a]",
    "{a: 1}",
    "? complex",
]


def random_value(rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if depth > 4 or roll < 0.45:
        return rng.choice(SCALARS)
    if roll < 0.7:
        return "[" + ", ".join(random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    return (
        "{" + ", ".join(f"{rng.choice(KEYS)}: {random_value(rng, depth + 1)}" for _ in range(rng.randint(0, 3))) + "}"
    )


def random_document(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 8)):
        indent = "  " * rng.randint(0, 4)
        lines.append(f"{indent}{rng.choice(KEYS)}: {random_value(rng, 0)}")
    return "\n".join(lines) + "\n"


def mutate(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        kind = rng.random()
        if kind < 0.3:
            head, _, _ = lines[i].partition(":")
            lines[i] = f"{head}: {rng.choice(SCALARS)}"
        elif kind < 0.5:
            lines.insert(i, lines[i].split(":")[0] + ": " + random_value(rng, 0))
        elif kind < 0.7:
            del lines[i]
        elif kind < 0.85:
            lines[i] = " " * rng.randint(0, 9) + lines[i].lstrip()
        else:
            lines[i] = lines[i].replace(":", rng.choice([": &x", ": *x", ": !!int", ":"]), 1)
    return "\n".join(lines) + "\n"


def deep(rng: random.Random) -> str:
    n = rng.choice([70, 500, 5000])
    opener, closer = rng.choice([("[", "]"), ("{a: ", "}"), ("- ", "")])
    if closer:
        return "on: push\njobs: " + opener * n + "1" + closer * n + "\n"
    return "on: push\njobs:\n" + "".join("  " * i + opener + "\n" for i in range(min(n, 400)))


def check(text: str | bytes) -> None:
    try:
        parse_workflow("fuzz.yml", text)
    except WorkflowSpecError as exc:
        assert exc.error.file == "fuzz.yml"
        # Not the safety net's "could not be parsed (SomeError)": every refusal is a real reason.
        assert "could not be parsed" not in exc.error.message, exc.error.render()
        assert exc.error.message


def test_parser_raises_only_its_own_error_on_hostile_input() -> None:
    rng = random.Random(SEED)
    for _ in range(1500):
        check(mutate(rng, BASE))
    for _ in range(1500):
        check(mutate(rng, BASE_JOBENV))
    for _ in range(1500):
        check(random_document(rng))
    for _ in range(300):
        check(rng.randbytes(rng.randint(0, 400)))
        check(BASE.encode()[: rng.randint(0, len(BASE))] + rng.randbytes(8))
    for _ in range(20):
        check(deep(rng))
    check(b"on: push\njobs: " + b"9" * 600_000)  # over the size limit


def test_fuzz_finds_real_failures_when_they_exist() -> None:
    # The generator must reach the constructs that broke the parser: tags, anchors, huge numbers.
    rng = random.Random(SEED)
    texts = [random_document(rng) for _ in range(500)] + [mutate(rng, BASE) for _ in range(500)]
    joined = "".join(texts)
    for construct in ("!!bool test", "&a 1", "9" * 400, "${{ '}}' }}", "(" * 80):
        assert construct in joined
