"""Resolving a workflow's actions at listing time, on real git repositories: refs become
commits, bad actions fail the file with its step's line and ``uses`` key, and the actions
source never lets a ``uses:`` reach an address or a path the operator did not configure."""

from __future__ import annotations

from pathlib import Path

import pytest

from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from activities.ci.actions import MAX_ACTION_DEPTH, ActionResolver, ActionSource
from activities.ci.git import GitMirror
from leasehold.clone_urls import ClonePolicy
from leasehold.settings import Settings
from tests.ci_actions.conftest import JS_ACTION, make_action_repo
from tests.ci_core.conftest import git
from workflows.ci.types.spec import WorkflowSpec

WORKFLOW_PATH = ".github/workflows/w.yml"


def _workflow(*uses: str) -> str:
    steps = "".join(f"      - uses: {u}\n        with: {{who name: x}}\n" for u in uses)
    return f"on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - run: echo first\n{steps}"


class Fixture:
    def __init__(self, tmp: Path, source: str | None = None) -> None:
        self.tmp = tmp
        self.settings = Settings(data_dir=tmp / "data", ci_local_repo_root=tmp / "repos")
        self.mirrors = tmp / "action-mirrors"
        self.mirrors.mkdir(exist_ok=True)
        self.repo = tmp / "repos" / "app"
        self.repo.mkdir(parents=True)
        git(self.repo, "init", "-q", "-b", "main")
        self.repo_mirror = GitMirror(tmp / "data" / "mirrors", ClonePolicy.from_settings(self.settings))
        settings = self.settings.model_copy(update={"ci_actions_source": source or str(self.mirrors)})
        self.source = ActionSource.from_settings(settings, tmp / "data" / "action-mirrors")

    def resolve(self, workflow: str, files: dict[str, str] | None = None) -> WorkflowSpec:
        for name, text in {**(files or {}), ".github/workflows/w.yml": workflow}.items():
            target = self.repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "--allow-empty", "-m", "c")
        sha = git(self.repo, "rev-parse", "HEAD")
        mirror = self.repo_mirror.ensure_commit("app", str(self.repo), sha)
        spec = parse_workflow(WORKFLOW_PATH, workflow)
        return ActionResolver(self.source, self.repo_mirror, mirror, sha).resolve_workflow(spec)


def _refusal(fixture: Fixture, workflow: str, files: dict[str, str] | None = None) -> str:
    with pytest.raises(WorkflowSpecError) as caught:
        fixture.resolve(workflow, files)
    error = caught.value.error
    assert (error.file, error.line, error.key) == (WORKFLOW_PATH, 7, "jobs.a.steps[1].uses"), error
    return error.message


def test_refs_resolve_to_commits_and_survive_the_payload_round_trip(tmp_path: Path) -> None:
    fixture = Fixture(tmp_path)
    v1 = make_action_repo(fixture.mirrors, "acme/js", {"action.yml": JS_ACTION, "main.js": ""})
    spec = fixture.resolve(_workflow("acme/js@v1", "acme/js@main", f"acme/js@{v1}"))
    steps = spec.jobs[0].steps[1:]
    assert [s.uses_sha for s in steps] == [v1, v1, v1]
    assert steps[0].resolved is not None and steps[0].resolved.sha == v1
    assert steps[0].resolved.repository == "acme/js" and steps[0].resolved.main == "main.js"
    assert WorkflowSpec.model_validate_json(spec.model_dump_json()) == spec
    # A moved tag is read afresh at the next listing: that run pins the new commit.
    (fixture.mirrors / "acme/js/main.js").write_text("// v1.1\n")
    git(fixture.mirrors / "acme/js", "commit", "-qam", "next")
    git(fixture.mirrors / "acme/js", "tag", "-f", "v1")
    moved = fixture.resolve(_workflow("acme/js@v1")).jobs[0].steps[1].uses_sha
    assert moved not in (None, v1)


def test_unknown_ref_missing_action_and_required_input_are_refused(tmp_path: Path) -> None:
    fixture = Fixture(tmp_path)
    make_action_repo(fixture.mirrors, "acme/js", {"action.yml": JS_ACTION, "main.js": ""})
    assert "has no tag, branch or commit 'nope'" in _refusal(fixture, _workflow("acme/js@nope"))
    assert "no action.yml" in _refusal(fixture, _workflow("acme/js/sub@v1"))
    assert "could not be fetched" in _refusal(fixture, _workflow("acme/absent@v1"))
    no_input = "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - run: echo\n      - uses: acme/js@v1\n"
    assert "input 'who name' is required" in _refusal(fixture, no_input)


def _local_chain(count: int, cyclic: bool = False) -> dict[str, str]:
    files = {}
    for i in range(count):
        nxt = f"./a{i + 1}" if i + 1 < count else ("./a0" if cyclic else None)
        step = f"    - uses: {nxt}\n" if nxt else "    - run: echo end\n      shell: sh\n"
        files[f"a{i}/action.yml"] = f"runs:\n  using: composite\n  steps:\n{step}"
    return files


def test_nesting_is_bounded_and_cycles_are_refused(tmp_path: Path) -> None:
    fixture = Fixture(tmp_path)
    spec = fixture.resolve(_workflow("./a0"), _local_chain(MAX_ACTION_DEPTH))
    assert spec.jobs[0].steps[1].resolved is not None
    assert "nest deeper than" in _refusal(fixture, _workflow("./a0"), _local_chain(MAX_ACTION_DEPTH + 1))
    assert "cycle" in _refusal(fixture, _workflow("./a0"), _local_chain(3, cyclic=True))


def test_a_planted_link_is_never_followed(tmp_path: Path) -> None:
    fixture = Fixture(tmp_path)
    (fixture.repo / "linked").mkdir()
    (fixture.repo / "linked" / "action.yml").symlink_to("/etc/passwd")
    assert "no action.yml" in _refusal(fixture, _workflow("./linked"))
    # In the mirrors directory: a repository that is a link out of it is not fetched.
    outside = tmp_path / "repos" / "elsewhere"
    make_action_repo(outside, "x/y", {"action.yml": JS_ACTION, "main.js": ""})
    (fixture.mirrors / "acme").mkdir()
    (fixture.mirrors / "acme" / "linked").symlink_to(outside / "x" / "y")
    assert "the actions source refuses acme/linked" in _refusal(fixture, _workflow("acme/linked@v1"))


@pytest.mark.parametrize(
    "template",
    [
        "https://127.0.0.1/{owner}/{repo}",
        "https://10.1.2.3/{owner}/{repo}",
        "https://[::1]/{owner}/{repo}",
        "https://169.254.169.254/{owner}/{repo}",
        "https://localhost/{owner}/{repo}",
        "https://git.internal/{owner}/{repo}",
        "http://git.example.com/{owner}/{repo}",
    ],
)
def test_a_source_url_obeys_the_clone_url_policy(tmp_path: Path, template: str) -> None:
    fixture = Fixture(tmp_path, source=template)
    assert "the actions source refuses acme/js" in _refusal(fixture, _workflow("acme/js@v1"))


def test_remote_sources_never_read_local_paths_and_need_their_placeholders(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", ci_local_repo_root=tmp_path)
    remote = ActionSource.from_settings(settings, tmp_path / "m")
    assert remote.clone_url("acme", "tool") == "https://github.com/acme/tool"
    assert remote.mirrors.policy.local_root is None
    for bad in ("relative/dir", "https://example.com/{owner}"):
        with pytest.raises(ValueError):
            ActionSource.from_settings(settings.model_copy(update={"ci_actions_source": bad}), tmp_path / "m")
