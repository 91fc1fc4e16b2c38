"""Another repository's reusable workflow (``owner/repo/.github/workflows/f.yml@ref``): expanded
as a local one is (from a reader that stands for the actions source), and read when a push is
listed from the operator's actions source on real git repositories: the ref pinned to one
commit for the push, a local call inside it read from that repository at that commit, and
refusals naming the caller's file, line and key (no source on the deployment, an unknown ref,
a missing file, a symbolic link, ``secrets: inherit`` across repositories, a bad name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from actions_language.expansion import CalledWorkflowUnavailable
from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError
from activities.ci.actions import ActionSource
from activities.ci.git import GitMirror
from activities.ci.listing import CIListingActivities
from leasehold.clone_urls import ClonePolicy
from leasehold.settings import Settings
from tests.ci_actions.conftest import make_action_repo
from tests.ci_core.conftest import git
from workflows.ci.types.push import ListWorkflowsInput
from workflows.ci.types.spec import SpecError, WorkflowSpec

PATH = ".github/workflows/ci.yml"
CALLED = "other-owner/shared/.github/workflows/build.yml@v1"

SHARED = """
on:
  workflow_call:
    inputs:
      target: {type: string, required: true}
    secrets:
      token: {required: false}
    outputs:
      artifact:
        value: ${{ jobs.build.outputs.name }}
jobs:
  build:
    runs-on: linux
    outputs:
      name: ${{ steps.b.outputs.name }}
    steps:
      - id: b
        run: echo "name=${{ inputs.target }}-VERSION.tar" >> "$GITHUB_OUTPUT"
  more:
    needs: build
    uses: ./.github/workflows/helper.yml
    secrets: inherit
"""
HELPER = """
on: workflow_call
jobs:
  help:
    runs-on: linux
    steps:
      - run: echo "token=${{ secrets.token }}"
"""
CALLER = f"""
on: push
jobs:
  call:
    uses: {CALLED}
    with:
      target: app
    secrets:
      token: ${{{{ secrets.DEPLOY }}}}
  report:
    needs: call
    runs-on: linux
    steps:
      - run: echo "artifact=${{{{ needs.call.outputs.artifact }}}}"
"""


@dataclass
class Repositories:
    """Stands for the actions source: ``(owner/repo, ref) -> (sha, files)``; records each read."""

    own: dict[str, str] = field(default_factory=dict)
    other: dict[tuple[str, str], tuple[str, dict[str, str]]] = field(default_factory=dict)
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(self, path: str) -> bytes | None:
        text = self.own.get(path)
        return None if text is None else text.encode()

    def other_repository(self, repository: str, ref: str, path: str) -> tuple[str, bytes]:
        self.asked.append((repository, ref, path))
        for (name, tag), (sha, files) in self.other.items():
            if name == repository.lower() and ref in (tag, sha):
                if path not in files:
                    raise CalledWorkflowUnavailable(f"{repository} has no {path}")
                return sha, files[path].encode()
        raise CalledWorkflowUnavailable(f"{repository} has no tag, branch or commit {ref!r}")


SHA = "a" * 40


def shared_repositories() -> Repositories:
    files = {".github/workflows/build.yml": SHARED, ".github/workflows/helper.yml": HELPER}
    return Repositories(other={("other-owner/shared", "v1"): (SHA, files)})


def refused(text: str, repositories: Repositories) -> SpecError:
    with pytest.raises(WorkflowSpecError) as caught:
        parse_workflow(PATH, text, repositories)
    return caught.value.error


def test_another_repositorys_workflow_expands_like_a_local_one() -> None:
    repositories = shared_repositories()
    spec = parse_workflow(PATH, CALLER, repositories)
    jobs = {j.id: j for j in spec.jobs}
    assert list(jobs) == ["call__build", "call__more__help", "report"]
    assert jobs["call__more__help"].name == "call / more / help"
    assert jobs["call__build"].steps[0].run is not None and "app-VERSION.tar" in jobs["call__build"].steps[0].run
    # The secret passed by name reaches the nested call through its 'inherit' (same repository).
    assert jobs["call__more__help"].secrets == ["DEPLOY"]
    assert "call__build" in jobs["report"].needs
    # The local call inside the other repository's file: that repository, at the pinned commit.
    assert repositories.asked == [
        ("other-owner/shared", "v1", ".github/workflows/build.yml"),
        ("other-owner/shared", SHA, ".github/workflows/helper.yml"),
    ]


def test_secrets_inherit_to_another_repository_is_refused() -> None:
    caller = CALLER.replace("    secrets:\n      token: ${{ secrets.DEPLOY }}\n", "    secrets: inherit\n")
    error = refused(caller, shared_repositories())
    assert (error.file, error.line, error.key) == (PATH, 8, "jobs.call.secrets"), error
    assert "'inherit' is not supported for a workflow of another repository" in error.message
    assert CALLED in error.message


def test_a_cycle_through_repositories_is_refused() -> None:
    back = "on: workflow_call\njobs:\n  next:\n    uses: other-owner/a/.github/workflows/x.yml@v1\n"
    ahead = "on: workflow_call\njobs:\n  next:\n    uses: other-owner/b/.github/workflows/y.yml@main\n"
    repositories = Repositories(
        other={
            ("other-owner/a", "v1"): ("1" * 40, {".github/workflows/x.yml": ahead}),
            ("other-owner/b", "main"): ("2" * 40, {".github/workflows/y.yml": back}),
        }
    )
    error = refused(back.replace("workflow_call", "push"), repositories)
    assert error.file == "other-owner/b/.github/workflows/y.yml@main" and error.key == "jobs.next.uses"
    assert (
        "cannot call itself" in error.message and f"other-owner/a/.github/workflows/x.yml@{'1' * 40}" in error.message
    )


@pytest.mark.parametrize(
    "uses",
    [
        "other-owner/shared/.github/workflows/sub/build.yml@v1",
        "other-owner/shared/.github/workflows/../build.yml@v1",
        "other-owner/shared/.github/build.yml@v1",
        "other-owner/shared/.github/workflows/build.txt@v1",
        "other-owner/shared/.github/workflows/build.yml",
        "other-owner/shared/.github/workflows/build.yml@-x",
        "other-owner/shared/.github/workflows/build.yml@a..b",
        "-x/shared/.github/workflows/build.yml@v1",
        "other-owner/../.github/workflows/build.yml@v1",
        "https://example.com/a/.github/workflows/build.yml@v1",
        "docker://other-owner/shared/.github/workflows/build.yml@v1",
    ],
)
def test_a_bad_name_is_refused_before_anything_is_read(uses: str) -> None:
    repositories = shared_repositories()
    error = refused(f"on: push\njobs:\n  c:\n    uses: '{uses}'\n", repositories)
    assert (error.file, error.line, error.key) == (PATH, 4, "jobs.c.uses"), error
    assert repositories.asked == []


# At listing time, on real git repositories -------------------------------------------------------


class Listing:
    """A repository of the run and a directory of mirrors as the actions source (or none)."""

    def __init__(self, tmp: Path, with_source: bool = True) -> None:
        settings = Settings(data_dir=tmp / "data", ci_local_repo_root=tmp / "repos")
        self.mirrors = tmp / "actions"
        self.mirrors.mkdir()
        self.repo = tmp / "repos" / "app"
        self.repo.mkdir(parents=True)
        git(self.repo, "init", "-q", "-b", "main")
        source = None
        if with_source:
            configured = settings.model_copy(update={"ci_actions_source": str(self.mirrors)})
            source = ActionSource.from_settings(configured, tmp / "data" / "action-mirrors")
        mirror = GitMirror(tmp / "data" / "mirrors", ClonePolicy.from_settings(settings))
        self.activities = CIListingActivities(mirror, actions=source)

    def push(self, files: dict[str, str]) -> dict[str, WorkflowSpec | SpecError]:
        for name, text in files.items():
            (self.repo / name).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / name).write_text(text)
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "--allow-empty", "-m", "c")
        sha = git(self.repo, "rev-parse", "HEAD")
        inp = ListWorkflowsInput(repo_id="app", clone_url=str(self.repo), commit_sha=sha, ref="refs/heads/main")
        result = ActivityEnvironment().run(self.activities.list_workflows, inp)
        return {f.path: f.spec or f.error for f in result.files if f.spec or f.error}

    def refusal(self, files: dict[str, str]) -> SpecError:
        (found,) = self.push(files).values()
        assert isinstance(found, SpecError), found
        return found


def shared_mirror(mirrors: Path, version: str) -> str:
    return make_action_repo(
        mirrors,
        "other-owner/shared",
        {".github/workflows/build.yml": SHARED.replace("VERSION", version), ".github/workflows/helper.yml": HELPER},
    )


def build_step(spec: WorkflowSpec | SpecError) -> str:
    assert isinstance(spec, WorkflowSpec), spec
    run = {j.id: j for j in spec.jobs}["call__build"].steps[0].run
    assert run is not None
    return run


def test_the_listing_pins_the_ref_and_expands_the_file_read_there(tmp_path: Path) -> None:
    listing = Listing(tmp_path)
    shared_mirror(listing.mirrors, "one")
    listed = listing.push({PATH: CALLER, ".github/workflows/again.yml": CALLER})
    # Both files of the push expand the commit v1 named when the push was listed.
    assert [build_step(s) for s in listed.values()] == [build_step(listed[PATH])] * 2
    assert "app-one.tar" in build_step(listed[PATH])
    # The tag moves: the next push reads it afresh; the runs already listed keep what they hold.
    shared = listing.mirrors / "other-owner/shared"
    (shared / ".github/workflows/build.yml").write_text(SHARED.replace("VERSION", "two"))
    git(shared, "commit", "-qam", "two")
    git(shared, "tag", "-f", "v1")
    assert "app-two.tar" in build_step(listing.push({"README": "next"})[PATH])
    assert "app-one.tar" in build_step(listed[PATH])


def test_without_an_actions_source_it_is_not_supported_here(tmp_path: Path) -> None:
    listing = Listing(tmp_path, with_source=False)
    error = listing.refusal({PATH: CALLER})
    assert (error.file, error.line, error.key) == (PATH, 5, "jobs.call.uses"), error
    assert CALLED in error.message and "not supported on this deployment" in error.message


def test_an_unknown_repository_ref_or_file_is_refused_naming_the_called_workflow(tmp_path: Path) -> None:
    listing = Listing(tmp_path)
    sha = shared_mirror(listing.mirrors, "one")
    cases = {
        "other-owner/shared/.github/workflows/gone.yml@v1": f"no .github/workflows/gone.yml at v1 (commit {sha[:12]})",
        "other-owner/shared/.github/workflows/build.yml@v9": "has no tag, branch or commit 'v9'",
        "other-owner/absent/.github/workflows/build.yml@v1": "could not be fetched from the actions source",
    }
    for uses, why in cases.items():
        error = listing.refusal({PATH: CALLER.replace(CALLED, uses)})
        assert (error.file, error.line, error.key) == (PATH, 5, "jobs.call.uses"), error
        assert f"called workflow {uses}: " in error.message and why in error.message, error


def test_a_symbolic_link_in_the_mirror_is_never_followed(tmp_path: Path) -> None:
    listing = Listing(tmp_path)
    # A valid reusable workflow outside .github/workflows, and links to it: the file itself, and
    # a .github/workflows that is a link to the directory holding it.
    make_action_repo(listing.mirrors, "other-owner/linked", {"outside/build.yml": SHARED, "outside/helper.yml": HELPER})
    linked = listing.mirrors / "other-owner/linked"
    (linked / ".github/workflows").mkdir(parents=True)
    (linked / ".github/workflows/build.yml").symlink_to("../../outside/build.yml")
    git(linked, "add", "-A")
    git(linked, "commit", "-qm", "file link")
    git(linked, "tag", "file-link")
    git(linked, "rm", "-rq", ".github")
    (linked / ".github").mkdir()
    (linked / ".github/workflows").symlink_to("../outside")
    git(linked, "add", "-A")
    git(linked, "commit", "-qm", "directory link")
    git(linked, "tag", "dir-link")
    for tag in ("file-link", "dir-link"):
        uses = f"other-owner/linked/.github/workflows/build.yml@{tag}"
        error = listing.refusal({PATH: CALLER.replace(CALLED, uses)})
        assert (error.file, error.line, error.key) == (PATH, 5, "jobs.call.uses"), error
        assert f"called workflow {uses}: " in error.message and "a symbolic link is refused" in error.message
