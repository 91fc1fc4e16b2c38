"""Triggers as GitHub documents them: filter patterns, push and pull_request filters, paths.

Table-driven from GitHub's "Workflow syntax" filter cheat sheet and event docs; the changed
files come from real git (``GitMirror.changed_files``), and a hostile pattern or base ref
costs bounded time and never reaches git as a revision expression.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from actions_language.filters import glob_match, matches_any
from actions_language.inputs import DispatchInputError, check_shape, resolve_inputs
from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from actions_language.triggers import (
    has_path_filter,
    paths_match,
    pull_request_triggers,
    push_triggers,
    typed_event_triggers,
    workflow_run_triggers,
)
from activities.ci.git import GitMirror
from activities.ci.listing import CIListingActivities
from leasehold.clone_urls import ClonePolicy
from leasehold.database import init_database
from leasehold.records.ci.run_numbers import assign_run_number
from leasehold.settings import Settings
from tests.ci_core.conftest import git
from tests.conftest import sqlite_url
from workflows.ci.types.push import ListWorkflowsInput

JOBS = "jobs:\n  a:\n    runs-on: linux\n    steps:\n      - run: echo hi\n"


def spec_of(on: str):  # type: ignore[no-untyped-def]
    return parse_workflow(".github/workflows/t.yml", on + JOBS)


# Filter patterns (GitHub's cheat sheet) ---------------------------------------------------------

GLOBS = [
    # branches and tags
    ("feature/*", "feature/my-branch", True),
    ("feature/*", "feature/a/b", False),
    ("feature/**", "feature/mona/the/octocat", True),
    ("*", "main", True),
    ("*", "releases/mona", False),
    ("**", "releases/mona", True),
    ("*feature", "mona-feature", True),
    ("*feature", "feature", True),
    ("v2*", "v2", True),
    ("v2*", "v2.9", True),
    ("v2*", "v3", False),
    ("v[12].[0-9]+.[0-9]+", "v1.10.1", True),
    ("v[12].[0-9]+.[0-9]+", "v2.0.0", True),
    ("v[12].[0-9]+.[0-9]+", "v3.0.0", False),
    ("v[12].[0-9]+.[0-9]+", "v1..1", False),
    # paths
    ("*", "README.md", True),
    ("*", "docs/README.md", False),
    ("*.jsx?", "page.js", True),
    ("*.jsx?", "page.jsx", True),
    ("*.jsx?", "page.jsxx", False),
    ("*.js", "app.js", True),
    ("*.js", "js/app.js", False),
    ("**.js", "src/js/app.js", True),
    ("docs/*", "docs/file.txt", True),
    ("docs/*", "docs/mona/octocat.txt", False),
    ("docs/**", "docs/mona/octocat.txt", True),
    ("docs/**/*.md", "docs/README.md", True),
    ("docs/**/*.md", "docs/a/markdown/file.md", True),
    ("docs/**/*.md", "docs/a/file.txt", False),
    ("**/docs/**", "docs/hello.md", True),
    ("**/docs/**", "space/docs/plan/space.doc", True),
    ("**/docs/**", "mydocs/x", False),
    ("**/README.md", "README.md", True),
    ("**/README.md", "js/README.md", True),
    ("**/*src/**", "a/src/app.js", True),
    ("**/*src/**", "my-src/code/js/app.js", True),
    ("**/*-post.md", "path/their-post.md", True),
    ("**/migrate-*.sql", "db/sept/migrate-v1.sql", True),
    ("**/migrate-*.sql", "db/migrate-v1.sql.bak", False),
    ("a\\*b", "a*b", True),
    ("a\\*b", "axb", False),
]


@pytest.mark.parametrize(("pattern", "name", "expected"), GLOBS, ids=[f"{p} ~ {n}" for p, n, _ in GLOBS])
def test_filter_patterns(pattern: str, name: str, expected: bool) -> None:
    assert glob_match(pattern, name) is expected


ORDERED = [
    (["*.md", "!README.md"], "hello.md", True),
    (["*.md", "!README.md"], "README.md", False),
    (["*.md", "!README.md"], "docs/hello.md", False),
    (["*.md", "!README.md", "README*"], "README.md", True),
    (["*.md", "!README.md", "README*"], "README.doc", True),
    (["releases/**", "!releases/**-alpha"], "releases/beta/mona", True),
    (["releases/**", "!releases/**-alpha"], "releases/10-alpha", False),
]


@pytest.mark.parametrize(("patterns", "name", "expected"), ORDERED)
def test_later_patterns_win_and_bang_negates(patterns: list[str], name: str, expected: bool) -> None:
    assert matches_any(patterns, name) is expected


def test_a_hostile_pattern_costs_bounded_time() -> None:
    # A backtracking regex would take hours here (``.*a`` repeated against a long miss).
    pattern, name = "**a" * 40 + "b", "a" * 4000
    started = time.monotonic()
    assert not glob_match(pattern, name)
    assert time.monotonic() - started < 20


# on.push: branches, branches-ignore, tags, tags-ignore --------------------------------------------


@dataclass
class PushCase:
    on: str
    ref: str
    triggered: bool


PUSH_CASES = [
    PushCase("on: push\n", "refs/heads/dev", True),
    PushCase("on: push\n", "refs/tags/v1", True),
    PushCase("on: [pull_request]\n", "refs/heads/main", False),
    PushCase("on:\n  push:\n    branches: [main]\n", "refs/heads/main", True),
    PushCase("on:\n  push:\n    branches: [main]\n", "refs/heads/dev", False),
    # Only branch filters: tags do not trigger (and the other way round).
    PushCase("on:\n  push:\n    branches: [main]\n", "refs/tags/v1", False),
    PushCase("on:\n  push:\n    branches-ignore: [dev, 'wip/**']\n", "refs/heads/main", True),
    PushCase("on:\n  push:\n    branches-ignore: [dev, 'wip/**']\n", "refs/heads/wip/a/b", False),
    PushCase("on:\n  push:\n    branches-ignore: [dev]\n", "refs/tags/v1", False),
    PushCase("on:\n  push:\n    tags: ['v*']\n", "refs/tags/v1.2", True),
    PushCase("on:\n  push:\n    tags: ['v*']\n", "refs/tags/x1", False),
    PushCase("on:\n  push:\n    tags: ['v*']\n", "refs/heads/main", False),
    PushCase("on:\n  push:\n    tags-ignore: ['v1.*']\n", "refs/tags/v1.0", False),
    PushCase("on:\n  push:\n    tags-ignore: ['v1.*']\n", "refs/tags/v2.0", True),
    PushCase("on:\n  push:\n    tags-ignore: ['v1.*']\n", "refs/heads/main", False),
    PushCase("on:\n  push:\n    branches: [main]\n    tags: ['v*']\n", "refs/tags/v3", True),
    PushCase("on:\n  push:\n    branches: [main]\n    tags: ['v*']\n", "refs/heads/main", True),
    PushCase("on:\n  push:\n    branches: ['releases/**', '!releases/**-alpha']\n", "refs/heads/releases/1", True),
    PushCase(
        "on:\n  push:\n    branches: ['releases/**', '!releases/**-alpha']\n", "refs/heads/releases/1-alpha", False
    ),
    # Only path filters: branches and tags both trigger (paths are checked on their own).
    PushCase("on:\n  push:\n    paths: ['src/**']\n", "refs/heads/dev", True),
    PushCase("on:\n  push:\n    paths: ['src/**']\n", "refs/tags/v1", True),
    PushCase("on: push\n", "refs/pull/3/head", False),
]


@pytest.mark.parametrize("case", PUSH_CASES, ids=[f"{c.on!r} {c.ref}" for c in PUSH_CASES])
def test_push_filters(case: PushCase) -> None:
    assert push_triggers(spec_of(case.on).on_push, case.ref) is case.triggered


# on.pull_request: types and branches (of the base) ------------------------------------------------

PR_CASES = [
    ("on: pull_request\n", "main", "opened", True),
    ("on: pull_request\n", "main", "synchronize", True),
    ("on: pull_request\n", "main", "reopened", True),
    ("on: push\n", "main", "opened", False),
    ("on:\n  pull_request:\n    types: [opened]\n", "main", "opened", True),
    ("on:\n  pull_request:\n    types: [opened]\n", "main", "synchronize", False),
    ("on:\n  pull_request:\n    branches: [main]\n", "main", "opened", True),
    ("on:\n  pull_request:\n    branches: [main]\n", "dev", "opened", False),
    ("on:\n  pull_request:\n    branches: ['releases/**']\n", "releases/2", "synchronize", True),
    ("on:\n  pull_request:\n    branches-ignore: ['docs/*']\n", "docs/x", "opened", False),
    ("on:\n  pull_request:\n    branches-ignore: ['docs/*']\n", "main", "opened", True),
    ("on:\n  pull_request:\n    types: [reopened]\n    branches: [main]\n", "main", "opened", False),
    # Every activity type GitHub has, when the file asks for it; not by default.
    ("on: pull_request\n", "main", "closed", False),
    ("on:\n  pull_request:\n    types: [closed, labeled]\n", "main", "closed", True),
    ("on:\n  pull_request:\n    types: [closed, labeled]\n", "main", "labeled", True),
    ("on:\n  pull_request:\n    types: [ready_for_review]\n", "main", "opened", False),
]


@pytest.mark.parametrize(("on", "base", "action", "triggered"), PR_CASES)
def test_pull_request_filters(on: str, base: str, action: str, triggered: bool) -> None:
    assert pull_request_triggers(spec_of(on).on_pull_request, base, action) is triggered


# pull_request_target, release, merge_group, workflow_run -------------------------------------------

TARGET_CASES = [
    ("on: pull_request_target\n", "main", "opened", True),
    ("on: [pull_request]\n", "main", "opened", False),
    ("on:\n  pull_request_target:\n    types: [labeled]\n    branches: [main]\n", "main", "labeled", True),
    ("on:\n  pull_request_target:\n    types: [labeled]\n    branches: [main]\n", "dev", "labeled", False),
    ("on:\n  pull_request_target:\n    branches-ignore: [main]\n", "main", "synchronize", False),
]


@pytest.mark.parametrize(("on", "base", "action", "triggered"), TARGET_CASES)
def test_pull_request_target_filters(on: str, base: str, action: str, triggered: bool) -> None:
    spec = spec_of(on)
    assert pull_request_triggers(spec.on_pull_request_target, base, action) is triggered
    # One event's filter never triggers the other.
    assert pull_request_triggers(spec.on_pull_request, base, action) is (
        "pull_request:" in on or "[pull_request]" in on
    )


TYPED_CASES = [
    ("on: release\n", "release", "published", True),
    ("on: release\n", "release", "deleted", True),
    ("on:\n  release:\n    types: [published]\n", "release", "published", True),
    ("on:\n  release:\n    types: [published]\n", "release", "created", False),
    ("on: [push, merge_group]\n", "merge_group", "checks_requested", True),
    ("on:\n  merge_group:\n    types: [checks_requested]\n", "merge_group", "checks_requested", True),
    ("on: push\n", "release", "published", False),
    ("on: push\n", "merge_group", "checks_requested", False),
]


@pytest.mark.parametrize(("on", "event", "action", "triggered"), TYPED_CASES)
def test_release_and_merge_group_types(on: str, event: str, action: str, triggered: bool) -> None:
    spec = spec_of(on)
    event_filter = spec.on_release if event == "release" else spec.on_merge_group
    assert typed_event_triggers(event_filter, action) is triggered


WORKFLOW_RUN_CASES = [
    ("on:\n  workflow_run:\n    workflows: [CI]\n", "CI", "completed", "main", True),
    ("on:\n  workflow_run:\n    workflows: [CI]\n", "CI", "requested", "main", True),
    ("on:\n  workflow_run:\n    workflows: [CI]\n", "CI", "in_progress", "main", False),
    ("on:\n  workflow_run:\n    workflows: [CI]\n", "Deploy", "completed", "main", False),
    (
        "on:\n  workflow_run:\n    workflows: ['Build *']\n    types: [completed]\n",
        "Build linux",
        "completed",
        "x",
        True,
    ),
    ("on:\n  workflow_run:\n    workflows: [CI]\n    branches: [main]\n", "CI", "completed", "dev", False),
    ("on:\n  workflow_run:\n    workflows: [CI]\n    branches-ignore: [main]\n", "CI", "completed", "dev", True),
]


@pytest.mark.parametrize(("on", "name", "action", "branch", "triggered"), WORKFLOW_RUN_CASES)
def test_workflow_run_filters(on: str, name: str, action: str, branch: str, triggered: bool) -> None:
    assert workflow_run_triggers(spec_of(on).on_workflow_run, name, action, branch) is triggered


# paths / paths-ignore over the changed files --------------------------------------------------------

PATH_CASES = [
    ("on:\n  push:\n    paths: ['src/**']\n", ["docs/a.md"], False),
    ("on:\n  push:\n    paths: ['src/**']\n", ["docs/a.md", "src/x.py"], True),
    ("on:\n  push:\n    paths-ignore: ['src/**']\n", ["docs/a.md"], True),
    ("on:\n  push:\n    paths-ignore: ['src/**']\n", ["src/a.py", "src/b/c.py"], False),
    ("on:\n  push:\n    paths: ['sub/**', '!sub/docs/**']\n", ["sub/docs/a.md"], False),
    ("on:\n  push:\n    paths: ['sub/**', '!sub/docs/**']\n", ["sub/docs/a.md", "sub/a.c"], True),
    # No changed file (an empty commit): neither filter matches, as on GitHub.
    ("on:\n  push:\n    paths: ['**']\n", [], False),
    ("on:\n  push:\n    paths-ignore: ['docs/**']\n", [], False),
    ("on:\n  pull_request:\n    paths: ['src/**']\n", ["src/a"], True),
    ("on:\n  pull_request:\n    paths-ignore: ['src/**']\n", ["src/a"], False),
]


@pytest.mark.parametrize(("on", "changed", "expected"), PATH_CASES)
def test_path_filters(on: str, changed: list[str], expected: bool) -> None:
    spec = spec_of(on)
    event = spec.on_pull_request if "pull_request" in on else spec.on_push
    assert has_path_filter(event)
    assert paths_match(event, changed) is expected


def test_an_unknown_or_oversized_diff_counts_as_matching() -> None:
    event = spec_of("on:\n  push:\n    paths: ['src/**']\n").on_push
    assert paths_match(event, None) is True


REFUSED = [
    ("on:\n  push:\n    branches: ['']\n", 3, "on.push.branches", "empty"),
    ("on:\n  push:\n    paths: ['" + "a" * 600 + "']\n", 3, "on.push.paths", "at most 512"),
    ("on:\n  push:\n    paths: [" + ", ".join(["a"] * 129) + "]\n", 3, "on.push.paths", "at most 128"),
    ("on:\n  pull_request:\n    paths: [a]\n    paths-ignore: [b]\n", 4, "on.pull_request.paths-ignore", "together"),
    ("on:\n  pull_request:\n    types: [labelled]\n", 3, "on.pull_request.types", "'labelled' is not one of: opened"),
    ("on:\n  push:\n    paths: {a: 1}\n", 3, "on.push.paths", "list of strings"),
    ("on:\n  release:\n    types: [tagged]\n", 3, "on.release.types", "'tagged' is not one of: published"),
    ("on:\n  release:\n    branches: [main]\n", 3, "on.release.branches", ""),
    ("on:\n  merge_group:\n    types: [opened]\n", 3, "on.merge_group.types", "checks_requested"),
    ("on:\n  workflow_run:\n    types: [completed]\n", 2, "on.workflow_run", "needs 'workflows:'"),
    ("on:\n  workflow_run:\n    workflows: [CI]\n    types: [done]\n", 4, "on.workflow_run.types", "'done'"),
    ("on:\n  schedule:\n    - cron: '* * * *'\n", 3, "on.schedule.cron", "five fields"),
    ("on:\n  schedule:\n    - cron: '0 25 * * *'\n", 3, "on.schedule.cron", "hour: '25' is outside 0-23"),
    ("on:\n  schedule:\n    - cron: '0 0 * * 8'\n", 3, "on.schedule.cron", "day of the week: '8' is outside 0-7"),
    ("on:\n  schedule:\n    - cron: 5\n", 3, "on.schedule.cron", "in quotes"),
    ("on:\n  schedule: daily\n", 2, "on.schedule", "list of '- cron"),
    ("on: [push, schedule]\n", 1, "on.schedule", "needs its times"),
]


@pytest.mark.parametrize(("on", "line", "key", "words"), REFUSED)
def test_bad_filters_are_refused_with_line_and_key(on: str, line: int, key: str, words: str) -> None:
    with pytest.raises(WorkflowSpecError) as err:
        spec_of(on)
    assert (err.value.error.line, err.value.error.key) == (line, key), err.value
    assert words in err.value.error.message


# Changed files from real git ------------------------------------------------------------------


@pytest.fixture
def mirror_repo(tmp_path: Path) -> tuple[GitMirror, Path, Path]:
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    settings = Settings(data_dir=tmp_path / "data", ci_local_repo_root=tmp_path)
    return GitMirror(tmp_path / "data" / "mirrors", ClonePolicy.from_settings(settings)), src, tmp_path


def _commit(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "c")
    return git(repo, "rev-parse", "HEAD")


def test_changed_files_of_pushes_and_pull_requests(mirror_repo: tuple[GitMirror, Path, Path]) -> None:
    mirror, src, _ = mirror_repo
    root = _commit(src, {"src/a.py": "1", "docs/a.md": "1"})
    second = _commit(src, {"docs/a.md": "2"})
    third = _commit(src, {"src/a.py": "3", "README": "x"})
    git(src, "checkout", "-q", "-b", "feature", second)
    feature = _commit(src, {"docs/b.md": "f"})
    git(src, "checkout", "-q", "main")
    path = mirror.ensure_commit("r1", str(src), feature)
    mirror.ensure_commit("r1", str(src), third)

    # before..head; a new branch (zeros) or a before the mirror lacks: the first parent.
    assert sorted(mirror.changed_files(path, third, root, 300) or []) == ["README", "docs/a.md", "src/a.py"]
    assert mirror.changed_files(path, third, "0" * 40, 300) == sorted(["README", "src/a.py"])
    assert mirror.changed_files(path, second, "f" * 40, 300) == ["docs/a.md"]
    assert sorted(mirror.changed_files(path, root, None, 300) or []) == ["docs/a.md", "src/a.py"]
    # A pull request: base...head, so the base branch's own later changes do not count.
    assert mirror.changed_files(path, feature, "refs/heads/main", 300, merge_base=True) == ["docs/b.md"]
    # Past the limit: unknown (the caller runs the workflow).
    assert mirror.changed_files(path, third, root, 2) is None
    # A base ref that would be a revision expression, or no branch at all, is never diffed.
    for hostile in ("refs/heads/main^", "refs/heads/main..feature", "refs/heads/x@{1}", "--output=/tmp/x", "HEAD"):
        assert mirror.changed_files(path, feature, hostile, 300, merge_base=True) is None
    assert mirror.changed_files(path, feature, "refs/heads/nope", 300, merge_base=True) is None


def test_a_diff_of_many_files_reads_no_more_than_the_limit(mirror_repo: tuple[GitMirror, Path, Path]) -> None:
    mirror, src, _ = mirror_repo
    base = _commit(src, {"keep": "1"})
    head = _commit(src, {f"many/f{i}": str(i) for i in range(400)})
    path = mirror.ensure_commit("r2", str(src), head)
    assert mirror.changed_files(path, head, base, 300) is None
    assert len(mirror.changed_files(path, head, base, 400) or []) == 400


# workflow_dispatch inputs ---------------------------------------------------------------------

DISPATCH_ON = """on:
  workflow_dispatch:
    inputs:
      name:
        required: true
      debug:
        type: boolean
      level:
        type: choice
        options: [low, high]
        default: low
      count:
        type: number
        default: 2
      env:
        type: environment
        required: false
"""


@dataclass
class InputCase:
    given: dict
    expected: dict | None = None
    field: str | None = None
    words: str = ""


INPUT_CASES = [
    InputCase({"name": "a"}, {"name": "a", "debug": False, "level": "low", "count": 2.0, "env": ""}),
    InputCase({"NAME": "a", "Debug": "TRUE"}, {"name": "a", "debug": True, "level": "low", "count": 2.0, "env": ""}),
    InputCase({"name": "a", "level": "high", "count": "3.5", "env": "prod"}, None),
    InputCase({"name": 7.0}, None),
    InputCase({}, field="inputs.name", words="required"),
    InputCase({"name": "a", "debug": "yes"}, field="inputs.debug", words="true or false"),
    InputCase({"name": "a", "debug": 1.0}, field="inputs.debug", words="true or false"),
    InputCase({"name": "a", "level": "mid"}, field="inputs.level", words="low, high"),
    InputCase({"name": "a", "count": "1e999"}, field="inputs.count", words="number"),
    InputCase({"name": "a", "count": True}, field="inputs.count", words="number"),
    InputCase({"name": "a", "env": "../prod"}, field="inputs.env", words="environment name"),
    InputCase({"name": "a", "other": "x"}, field="inputs.other", words="not an input"),
]


@pytest.mark.parametrize("case", INPUT_CASES, ids=[str(c.given) for c in INPUT_CASES])
def test_dispatch_inputs_are_checked_against_the_file(case: InputCase) -> None:
    spec = spec_of(DISPATCH_ON).on_dispatch
    assert spec is not None
    if case.field is None:
        values = resolve_inputs(spec, check_shape(case.given))
        assert set(values) == {"name", "debug", "level", "count", "env"}
        if case.expected is not None:
            assert values == case.expected
        return
    with pytest.raises(DispatchInputError) as err:
        resolve_inputs(spec, check_shape(case.given))
    assert err.value.field == case.field and case.words in err.value.message


SHAPES = [
    ({f"i{n}": "v" for n in range(26)}, "inputs"),
    ({"x": "v" * 70_000}, "inputs"),
    ({"1x": "v"}, "inputs.1x"),
    ({"x y": "v"}, "inputs.x y"),
    ({"x": None}, "inputs.x"),
    ({"x": [1]}, "inputs.x"),
    ({"x": float("nan")}, "inputs.x"),
    ({"x": 10**400}, "inputs.x"),
]


@pytest.mark.parametrize(("given", "field"), SHAPES)
def test_dispatch_request_shapes_are_bounded(given: dict, field: str) -> None:
    with pytest.raises(DispatchInputError) as err:
        check_shape(given)
    assert err.value.field == field


# github.run_number ----------------------------------------------------------------------------


def test_run_numbers_count_per_workflow_and_stay_with_their_run(tmp_path: Path) -> None:
    factory = init_database(sqlite_url(tmp_path))
    number = partial(assign_run_number, factory, "t1")
    assert number("r1", "a.yml", "run_1") == 1
    assert number("r1", "a.yml", "run_2") == 2
    # A redelivery or a retried listing asks again for the same run: the same number.
    assert number("r1", "a.yml", "run_1") == 1
    assert number("r1", "b.yml", "run_3") == 1
    assert number("r2", "a.yml", "run_4") == 1
    assert assign_run_number(factory, "t2", "r1", "a.yml", "run_5") == 1

    # Listings racing for one counter still hand out distinct numbers.
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda n: number("r9", "c.yml", f"run_c{n}"), range(16)))
    assert sorted(got) == list(range(1, 17))


# The listing activity: pull_request paths over base...head ---------------------------------------

PR_SRC = "on:\n  pull_request:\n    branches: [main]\n    paths: ['src/**']\n" + JOBS
PR_ANY = "on:\n  pull_request:\n    paths-ignore: ['src/**']\n" + JOBS


def test_pull_request_paths_are_the_changes_since_the_base(mirror_repo: tuple[GitMirror, Path, Path]) -> None:
    mirror, src, _ = mirror_repo
    _commit(src, {".github/workflows/src.yml": PR_SRC, ".github/workflows/any.yml": PR_ANY, "src/a.py": "1"})
    git(src, "checkout", "-q", "-b", "feature")
    docs_only = _commit(src, {"docs/a.md": "pr"})
    git(src, "checkout", "-q", "main")
    # The base moves on with a src change: not part of the pull request's diff.
    _commit(src, {"src/a.py": "2"})
    listing = CIListingActivities(mirror)

    def listed(head: str, base: str) -> dict[str, bool]:
        inp = ListWorkflowsInput(
            repo_id="r3",
            clone_url=str(src),
            commit_sha=head,
            ref="refs/pull/1/head",
            event="pull_request",
            base_ref=base,
            action="synchronize",
        )
        result = ActivityEnvironment().run(listing.list_workflows, inp)
        return {f.path.rsplit("/", 1)[-1]: f.triggered for f in result.files}

    assert listed(docs_only, "main") == {"any.yml": True, "src.yml": False}
    git(src, "checkout", "-q", "feature")
    with_src = _commit(src, {"src/b.py": "pr"})
    assert listed(with_src, "main") == {"any.yml": True, "src.yml": True}
    # The branch filter must match too; a base the mirror lacks leaves the diff unknown, which
    # counts as matching (any.yml has no branch filter).
    assert listed(with_src, "dev") == {"any.yml": True, "src.yml": False}


# on.schedule: GitHub's reading of a cron (UTC, names, weekday 7, five minutes at least) ------------

CRON_CASES = [
    ("*/5 * * * *", "0,5,10,15,20,25,30,35,40,45,50,55 * * * *"),
    ("*/1 * * * *", "0,5,10,15,20,25,30,35,40,45,50,55 * * * *"),
    ("* * * * *", "0,5,10,15,20,25,30,35,40,45,50,55 * * * *"),
    ("0,2,4,30 * * * *", "0,30 * * * *"),
    # 58 and the next hour's 0 are two minutes apart: 58 goes, when the hours follow each other.
    ("0,58 * * * *", "0 * * * *"),
    ("0,58 1 * * *", "0,58 1 * * *"),
    ("30 5 * * MON-FRI", "30 5 * * 1,2,3,4,5"),
    ("0 0 * * 7", "0 0 * * 0"),
    ("15 4 1 JAN,jul *", "15 4 1 1,7 *"),
]


@pytest.mark.parametrize(("cron", "runs"), CRON_CASES)
def test_a_cron_runs_as_github_runs_it(cron: str, runs: str) -> None:
    from activities.ci.schedules import temporal_cron

    spec = spec_of(f"on:\n  schedule:\n    - cron: '{cron}'\n")
    assert spec.on_schedule == [cron]
    assert temporal_cron(cron) == runs
