"""Attacks on the root CI worker through the files of a job's tree, each run for real: a real
Temporal dev server, the real CI worker (root) with bubblewrap, real git, real caches.

Before the root rule (``activities.ci.jobroot``) the worker, as root, extracted caches and
checkouts with tarfile, hashed files for ``hashFiles()`` and walked the tree to clean it.
A symlink chain longer than PATH_MAX defeats tarfile's realpath check (the CVE-2025-4517 class
of Python 3.11.7's tarfile), so a cache restore and a checkout of a tree with duplicate entries
(``git mktree`` accepts them) wrote root-owned files at host paths of the job's choosing. Now
every such operation runs as the job's uid inside its sandbox; these tests put the attack on
the stack and look at the host afterwards.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.ci_core.conftest import CIStack, Repo, engine_stack, git
from workflows.ci.types.run import RunStatus

pytestmark = pytest.mark.slow

# The chain: 16 directories of 242-character names, one-letter links to them, and a link of
# 254 characters back up; resolving it by path runs past PATH_MAX (4096), the kernel does not
# (the directories' own paths, from the test's data dir, stay below PATH_MAX).
COMP = "0" * 242
STEPS = "abcdefghijklmnop"
BACK = "l" * 254
CHAIN = "/".join(STEPS) + "/" + BACK


def chain_target(host_path: Path) -> str:
    """A link target that a textual realpath from a directory up to 17 levels deep judges to
    be inside it, while the kernel ends at ``host_path`` on the host."""
    return CHAIN + "/" + "../" * 17 + str(host_path).lstrip("/")


BUILD_CHAIN = f"""
python3 - <<'PY'
import os
os.chdir("/ci/work")
for s in "{STEPS}":
    os.mkdir("{COMP}"); os.symlink("{COMP}", s); os.chdir("{COMP}")
os.chdir("/ci/work")
os.symlink("../" * {len(STEPS)}, "{CHAIN}")
PY
"""


@pytest.fixture(scope="module")
def stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    with engine_stack(
        temporal_env,
        tmp_path_factory.mktemp("rootrule"),
        ci_sandbox_uid_base=1_750_000,
        ci_sandbox_uid_count=32,
    ) as s:
        yield s


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A host directory root can write to and no job can see (0700, root's)."""
    d = tmp_path / "host"
    d.mkdir(mode=0o700)
    return d


def indent(script: str, spaces: int = 10) -> str:
    return "\n".join(" " * spaces + line if line else line for line in script.strip("\n").splitlines())


async def run_commit(stack: CIStack, repo: Repo, sha: str) -> tuple[RunStatus, str]:
    pushed = await stack.push(repo, sha)
    assert len(pushed.runs) == 1, pushed
    state = await stack.wait_run(pushed.runs[0].run_id, within=180)
    attempt = state.jobs[0].current_attempt()
    log = stack.log_text(attempt.log_prefix) if attempt is not None and attempt.log is not None else ""
    return state.status, log + (f"\n{attempt.error}" if attempt is not None and attempt.error else "")


def assert_no_workspace_left(stack: CIStack, within: float = 30.0) -> None:
    # A finished job's root is emptied just after its result (activities.ci.reaper).
    workspaces = Path(stack.settings.data_dir) / "ci" / "workspaces"
    deadline = time.monotonic() + within
    while True:
        left = [p.name for p in workspaces.iterdir()] if workspaces.exists() else []
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert left == [], left


CACHE_SAVE = """
on: push
jobs:
  save:
    runs-on: linux
    steps:
      - uses: actions/cache@v4
        with:
          path: esc
          key: chain-{token}
      - run: echo "PWNED-{token}" > esc
"""

CACHE_RESTORE = """
on: push
jobs:
  restore:
    runs-on: linux
    steps:
      - run: |
{chain}
          ln -s '{target}' /ci/work/esc
          echo chain built
      - uses: actions/cache@v4
        with:
          path: esc
          key: chain-{token}
      - run: |
          ls -l esc || true
          cat esc || true
"""


async def test_a_cache_restore_through_a_symlink_chain_writes_nothing_on_the_host(
    stack: CIStack, host_dir: Path
) -> None:
    token = f"{time.monotonic_ns()}"
    victim = host_dir / "owned.txt"
    repo = stack.repo(f"cache-chain-{token}")
    first = repo.commit({".github/workflows/ci.yml": CACHE_SAVE.format(token=token)})
    status, log = await run_commit(stack, repo, first)
    assert status == RunStatus.SUCCESS, log
    assert f"cache 'chain-{token}' saved" in log, log

    workflow = CACHE_RESTORE.format(token=token, chain=indent(BUILD_CHAIN), target=chain_target(victim))
    second = repo.commit({".github/workflows/ci.yml": workflow})
    status, log = await run_commit(stack, repo, second)
    assert "chain built" in log, log
    assert not victim.exists(), victim.read_text()
    assert os.listdir(host_dir) == []
    # The restore replaced the job's link with the cached file, in the job's own tree.
    assert "cache hit" in log, log
    assert f"PWNED-{token}" in log, log
    assert status == RunStatus.SUCCESS, log
    assert_no_workspace_left(stack)


def write_object(repo: Path, kind: str, data: bytes) -> str:
    return (
        subprocess.run(
            ["git", "hash-object", "-w", "-t", kind, "--stdin"], cwd=repo, input=data, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )


def make_tree(repo: Path, entries: list[tuple[str, str, str, str]]) -> str:
    """``git mktree`` keeps entries as given, duplicates included (as an attacker's tree has)."""
    text = "".join(f"{mode} {kind} {sha}\t{name}\n" for mode, kind, sha, name in entries)
    return (
        subprocess.run(["git", "mktree"], cwd=repo, input=text.encode(), capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )


def hostile_commit(repo: Repo, workflow: str, victim_dir: Path) -> str:
    """A commit whose tree holds the chain (as real directories), a second tree ``a`` that
    reaches the 254-character link through the one-letter links, a link ``esc`` through the
    chain to ``victim_dir`` and, beside it, a directory ``esc`` holding ``owned.txt``."""
    path = repo.path
    link = lambda target: ("120000", "blob", write_object(path, "blob", target.encode()))  # noqa: E731
    keep = ("100644", "blob", write_object(path, "blob", b"keep\n"))
    # The real directories, innermost first: each holds the next and the next letter's link.
    inner = make_tree(path, [(*keep, ".keep")])
    for i in range(len(STEPS) - 1, 0, -1):
        inner = make_tree(path, [("040000", "tree", inner, COMP), (*link(COMP), STEPS[i])])
    comp_tree = inner
    # ``a/b/.../p/<254 l>``: a short member name that lands in the 16th directory.
    back = make_tree(path, [(*link("../" * len(STEPS)), BACK)])
    for letter in reversed(STEPS[1:]):
        back = make_tree(path, [("040000", "tree", back, letter)])
    owned = make_tree(path, [("100644", "blob", write_object(path, "blob", b"ROOT-WROTE-THIS\n"), "owned.txt")])
    wf = make_tree(path, [("100644", "blob", write_object(path, "blob", workflow.encode()), "ci.yml")])
    github = make_tree(path, [("040000", "tree", wf, "workflows")])
    top = make_tree(
        path,
        [
            ("040000", "tree", github, ".github"),
            ("040000", "tree", comp_tree, COMP),
            (*link(COMP), "a"),
            ("040000", "tree", back, "a"),
            (*link(chain_target(victim_dir)), "esc"),
            ("040000", "tree", owned, "esc"),
        ],
    )
    sha = git(path, "commit-tree", top, "-m", "hostile tree")
    git(path, "update-ref", "refs/heads/main", sha)
    return sha


CHECKOUT_WORKFLOW = """
on: push
jobs:
  look:
    runs-on: linux
    steps:
      - run: ls -la; cat esc/owned.txt 2>/dev/null || echo "no owned.txt in the checkout"
"""


async def test_a_checkout_with_duplicate_entries_writes_nothing_on_the_host(stack: CIStack, host_dir: Path) -> None:
    repo = stack.repo(f"dup-entries-{time.monotonic_ns()}")
    git(repo.path, "commit", "-q", "--allow-empty", "-m", "first")
    sha = hostile_commit(repo, CHECKOUT_WORKFLOW, host_dir)
    # git itself serves the tree as an attacker built it: both ``esc`` entries are there.
    listed = git(repo.path, "ls-tree", sha)
    assert listed.count("\tesc") == 2 and listed.count("\ta") == 2, listed
    status, log = await run_commit(stack, repo, sha)
    assert os.listdir(host_dir) == [], (os.listdir(host_dir), log)
    # Whatever the checkout made of the tree, it made it in the job's own workspace.
    assert "checked out" in log, log
    assert status == RunStatus.SUCCESS, log
    assert_no_workspace_left(stack)


HASH_FILES = """
on: push
jobs:
  hash:
    runs-on: linux
    steps:
      - run: |
          echo "plain" > ok.lock
          echo "only root could read this" > unreadable.lock && chmod 000 unreadable.lock
          mkfifo fifo.lock
          ln -s {secret} secret.lock
          mkdir -p deep && ln -s {secret_dir} deep/hostdir
      - run: echo "HASH=${{{{ hashFiles('**/*.lock', 'deep/hostdir/*') }}}}"
"""


async def test_hash_files_reads_as_the_job_not_through_links_fifos_or_root(stack: CIStack, host_dir: Path) -> None:
    secret = host_dir / "secret.lock"
    secret.write_text("HOST SECRET\n")
    os.chmod(host_dir, 0o755)
    os.chmod(secret, 0o600)
    repo = stack.repo(f"hash-{time.monotonic_ns()}")
    sha = repo.commit({".github/workflows/ci.yml": HASH_FILES.format(secret=secret, secret_dir=host_dir)})
    started = time.monotonic()
    status, log = await run_commit(stack, repo, sha)
    assert status == RunStatus.SUCCESS, log
    # Only the file the job itself can read counts: not the FIFO (never opened, no hang), not
    # the links to host files, and not the file the job made unreadable to itself, which root
    # would have read.
    expected = hashlib.sha256(hashlib.sha256(b"plain\n").digest()).hexdigest()
    assert f"HASH={expected}" in log, log
    assert time.monotonic() - started < 120
    assert_no_workspace_left(stack)


CLEANUP = """
on: push
jobs:
  mess:
    runs-on: linux
    steps:
      - run: |
{chain}
          ln -s '{target}' /ci/work/esc-dir
          ln -s {victim_dir} /ci/work/hostdir
          ln -s {victim} /ci/home/victim
          ln -s {victim_dir} /tmp/hostdir
          mkdir -p locked/inner && echo x > locked/inner/f && chmod 000 locked/inner locked
          mkdir -p /ci/home/ro && touch /ci/home/ro/f && chmod 500 /ci/home/ro
          echo mess made
"""


async def test_cleanup_follows_no_link_and_leaves_nothing(stack: CIStack, host_dir: Path) -> None:
    os.chmod(host_dir, 0o755)
    victim = host_dir / "victim.txt"
    victim.write_text("ORIGINAL\n")
    repo = stack.repo(f"cleanup-{time.monotonic_ns()}")
    workflow = CLEANUP.format(
        chain=indent(BUILD_CHAIN), target=chain_target(host_dir), victim_dir=host_dir, victim=victim
    )
    sha = repo.commit({".github/workflows/ci.yml": workflow})
    status, log = await run_commit(stack, repo, sha)
    assert "mess made" in log and status == RunStatus.SUCCESS, log
    assert sorted(os.listdir(host_dir)) == ["victim.txt"]
    assert victim.read_text() == "ORIGINAL\n"
    # The job's files, unreadable ones and the chain included, are gone, and so is its root.
    assert_no_workspace_left(stack)


SUMMARY = """
on: push
jobs:
  files:
    runs-on: linux
    steps:
      - id: x
        run: |
          set +e
          echo "## honest summary" >> "$GITHUB_STEP_SUMMARY"
          rm -f "$GITHUB_STEP_SUMMARY" 2>/dev/null; test -f "$GITHUB_STEP_SUMMARY" && echo SUMMARY_KEPT
          ln -sf {secret} "$GITHUB_STEP_SUMMARY" 2>/dev/null || echo SUMMARY_LINK_REFUSED
          mkfifo /ci/io/fifo 2>/dev/null || echo IO_DIR_CLOSED
          echo tampered > "$GITHUB_EVENT_PATH" 2>/dev/null || echo EVENT_READ_ONLY
          ln -sf {secret} /ci/runner/event.json 2>/dev/null || echo EVENT_LINK_REFUSED
          echo "out=value" >> "$GITHUB_OUTPUT"
      - run: |
          echo "second=${{{{ steps.x.outputs.out }}}}"
          python3 -c "import json; print('event ref', json.load(open('$GITHUB_EVENT_PATH'))['ref'])"
"""


async def test_step_files_and_the_event_file_reach_no_host_file(stack: CIStack, host_dir: Path) -> None:
    os.chmod(host_dir, 0o755)
    secret = host_dir / "secret.md"
    secret.write_text("HOST-SECRET-9931\n")
    os.chmod(secret, 0o600)
    repo = stack.repo(f"summary-{time.monotonic_ns()}")
    sha = repo.commit({".github/workflows/ci.yml": SUMMARY.format(secret=secret)})
    pushed = await stack.push(repo, sha)
    state = await stack.wait_run(pushed.runs[0].run_id, within=120)
    attempt = state.jobs[0].current_attempt()
    assert attempt is not None and attempt.log is not None
    log = stack.log_text(attempt.log_prefix)
    assert state.status == RunStatus.SUCCESS, log
    for said in ("SUMMARY_KEPT", "SUMMARY_LINK_REFUSED", "IO_DIR_CLOSED", "EVENT_READ_ONLY", "EVENT_LINK_REFUSED"):
        assert said in log, (said, log)
    assert "event ref refs/heads/main" in log, log
    assert attempt.log.summary_key is not None
    summary = stack.store.get(attempt.log.summary_key).decode()
    assert "## honest summary" in summary and "HOST-SECRET" not in summary
    assert secret.read_text() == "HOST-SECRET-9931\n"
    assert_no_workspace_left(stack)


LOOK_AROUND = """
on: push
jobs:
  look:
    runs-on: linux
    steps:
      - run: |
          echo "cmdline bytes=$(wc -c < /proc/cmdline)"
          grep -c -E 'mirrors|trees|lowerdir' /proc/self/mountinfo || echo "no mirror in the mounts"
      - uses: actions/cache@v4
        with:
          path: /etc/passwd
          key: outside
"""


async def test_what_the_job_sees_names_no_host_setup(stack: CIStack) -> None:
    repo = stack.repo(f"look-{time.monotonic_ns()}")
    sha = repo.commit({".github/workflows/ci.yml": LOOK_AROUND})
    status, log = await run_commit(stack, repo, sha)
    assert status == RunStatus.SUCCESS, log
    assert "cmdline bytes=1" in log and "no mirror in the mounts" in log, log
    # A cache warning speaks of the job's paths, never the worker's.
    assert "cache not restored: cache path '/etc/passwd' is outside the workspace" in log, log
    assert str(stack.settings.data_dir) not in log, log
