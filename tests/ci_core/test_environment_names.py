"""``environment:`` names written with ``${{ }}``, evaluated by the push's listing from real git:
over the run's ``github``, the push's ``vars`` and a dispatch's checked ``inputs``; the value
then reads the protection rules and variables a written name would, and every way it can fail
(a bad value, an evaluation error, no push given) fails only its file's run, naming file, line
and key."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from actions_language.environment_names import evaluate_names, name_expression
from actions_language.parser import parse_workflow
from actions_language.schema import FileContext, WorkflowSpecError
from activities.ci.git import GitMirror
from activities.ci.listing import CIListingActivities, listing_contexts
from leasehold.clone_urls import ClonePolicy
from leasehold.settings import Settings
from tests.ci_core.conftest import git
from workflows.ci.event import push_github_context
from workflows.ci.types.push import EnvironmentRule, ListWorkflowsInput, ListWorkflowsResult, PushContext

STEPS = "    runs-on: linux\n    steps: [{run: echo hi}]\n"


def workflow(environment: str, on: str = "push") -> str:
    return f"name: deploy\non: {on}\njobs:\n  deploy:\n    environment: {environment}\n{STEPS}  build:\n{STEPS}"


class Repo:
    """A source repository, its mirror, and a listing with recorded rule and variable reads."""

    def __init__(self, tmp_path: Path) -> None:
        self.src = tmp_path / "src"
        self.src.mkdir()
        git(self.src, "init", "-q", "-b", "main")
        settings = Settings(data_dir=tmp_path / "data", ci_local_repo_root=tmp_path)
        mirror = GitMirror(tmp_path / "data" / "mirrors", ClonePolicy.from_settings(settings))
        self.asked: list[set[str]] = []
        self.listing = CIListingActivities(mirror, environments=self._rules, environment_variables=self._variables)

    def _rules(self, tenant: str, repo: str, names: Iterable[str]) -> dict[str, EnvironmentRule]:
        wanted = {n.lower() for n in names}
        self.asked.append(wanted)
        return {n: EnvironmentRule(name=n, required_approval=True) for n in wanted if n == "production"}

    def _variables(self, tenant: str, repo: str, names: Iterable[str], budget: int) -> dict[str, dict[str, str]]:
        return {n.lower(): {"STAGE": n.lower()} for n in names}

    def commit(self, text: str, ref: str = "main") -> str:
        git(self.src, "checkout", "-q", "-B", ref)
        path = self.src / ".github" / "workflows" / "deploy.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(self.src, "add", "-A")
        git(self.src, "commit", "-q", "-m", "c")
        return git(self.src, "rev-parse", "HEAD")

    def push(self, sha: str, ref: str, variables: dict[str, str] | None = None, **given: object) -> PushContext:
        return PushContext(
            tenant_id="t1",
            repo_id="r1",
            repo_full_name="acme/app",
            clone_url=str(self.src),
            commit_sha=sha,
            ref=ref,
            variables=variables or {},
            **given,  # type: ignore[arg-type]
        )

    def list(self, push: PushContext, carried: bool = True) -> ListWorkflowsResult:
        """List ``push`` as ``CIPushWorkflow`` does (``carried=False``: as one started before
        the push was carried to the listing)."""
        inp = ListWorkflowsInput(
            repo_id="r1",
            clone_url=str(self.src),
            commit_sha=push.commit_sha,
            ref=push.ref,
            event=push.event,
            tenant_id="t1",
            dispatch_workflow=push.dispatch_workflow or None,
            inputs=dict(push.inputs),
            dispatch_key=push.dispatch_key,
            push=push if carried else None,
        )
        return ActivityEnvironment().run(self.listing.list_workflows, inp)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


CONDITIONAL = "${{ github.ref_name == 'main' && 'Production' || 'staging' }}"


@pytest.mark.parametrize(("branch", "name", "protected"), [("main", "Production", True), ("dev", "staging", False)])
def test_a_name_over_github_reads_the_rules_and_variables_of_its_value(
    repo: Repo, branch: str, name: str, protected: bool
) -> None:
    sha = repo.commit(workflow(CONDITIONAL), branch)
    result = repo.list(repo.push(sha, f"refs/heads/{branch}"))
    (file,) = result.files
    assert file.error is None and file.spec is not None
    deploy, build = file.spec.jobs
    # The run's spec holds the name only, as if written out.
    assert (deploy.environment, deploy.environment_expression) == (name, None)
    assert build.environment is None
    assert repo.asked == [{name.lower()}]
    assert ("production" in result.environments) is protected
    assert result.environment_variables == {name.lower(): {"STAGE": name.lower()}}


def test_a_name_from_vars_and_the_map_form(repo: Repo) -> None:
    sha = repo.commit(workflow('{name: "${{ vars.TARGET }}", url: "https://${{ vars.TARGET }}.example"}'))
    result = repo.list(repo.push(sha, "refs/heads/main", {"TARGET": "production"}))
    (file,) = result.files
    assert file.spec is not None and file.spec.jobs[0].environment == "production"
    assert result.environments["production"].required_approval


def test_an_empty_value_means_no_environment(repo: Repo) -> None:
    sha = repo.commit(workflow("${{ vars.MISSING }}"))
    result = repo.list(repo.push(sha, "refs/heads/main"))
    (file,) = result.files
    assert file.spec is not None and file.spec.jobs[0].environment is None
    assert repo.asked == [] and result.environments == {}


def test_a_dispatch_names_it_from_its_checked_inputs(repo: Repo) -> None:
    choice = "{type: choice, options: [staging, production], default: staging}"
    on = f"\n  workflow_dispatch:\n    inputs:\n      target: {choice}"
    repo.commit(workflow("${{ inputs.target }}-${{ github.event_name }}", on=on))
    push = repo.push("", "main", event="workflow_dispatch", dispatch_workflow="deploy.yml")
    for inputs, name in (({"target": "production"}, "production-workflow_dispatch"), ({}, "staging-workflow_dispatch")):
        result = repo.list(push.model_copy(update={"inputs": inputs}))
        (file,) = result.files
        assert file.spec is not None and file.spec.jobs[0].environment == name, file
    assert result.inputs == {"target": "staging"}
    # A listing not given the push cannot evaluate the name: the run fails, saying so.
    (file,) = repo.list(push, carried=False).files
    assert file.error is not None and "needs the push" in file.error.message
    assert (file.error.line, file.error.key) == (8, "jobs.deploy.environment")


@pytest.mark.parametrize(
    ("environment", "variables", "message"),
    [
        ("${{ vars.TARGET }}", {"TARGET": "prod eu"}, "letters, digits"),
        ("${{ vars.TARGET }}", {"TARGET": "p" * 101}, "at most 100"),
        ("${{ fromJSON(vars.TARGET) }}", {"TARGET": "{not json"}, "could not be evaluated: fromJSON"),
        ("${{ fromJSON(vars.TARGET) }}", {"TARGET": '{"a": 1}'}, "letters, digits"),
    ],
)
def test_a_bad_value_fails_its_files_run_naming_line_and_key(
    repo: Repo, environment: str, variables: dict[str, str], message: str
) -> None:
    sha = repo.commit(workflow(environment))
    result = repo.list(repo.push(sha, "refs/heads/main", variables))
    (file,) = result.files
    assert file.spec is None and file.triggered and file.error is not None
    assert (file.error.file, file.error.line, file.error.key) == (
        ".github/workflows/deploy.yml",
        5,
        "jobs.deploy.environment",
    )
    assert message in file.error.message, file.error.message
    # Nothing is read for a file that will not run.
    assert repo.asked == [] and result.environments == {}


def test_the_github_context_is_the_one_the_jobs_see() -> None:
    push = PushContext(
        tenant_id="t",
        repo_id="r",
        repo_full_name="acme/app",
        clone_url="",
        commit_sha="abc",
        ref="refs/tags/v1",
        actor="mona",
        variables={"A": "1"},
        inputs={"x": True},
    )
    contexts = listing_contexts(push, "run_1", "deploy")
    assert contexts == {
        "github": push_github_context(push, "run_1", "deploy"),
        "vars": {"A": "1"},
        "inputs": {"x": True},
    }
    text = workflow("${{ github.actor }}.${{ github.ref_type }}.${{ github.repository_owner }}.${{ inputs.x }}")
    spec = parse_workflow("deploy.yml", text)
    evaluate_names(spec, contexts)
    assert spec.jobs[0].environment == "mona.tag.acme.true"


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("${{ matrix.env }}", "context 'matrix'"),
        ("${{ strategy.job-index }}", "context 'strategy'"),
        ("${{ github.job }}", "github.job"),
        ("${{ github.run_attempt }}", "github.run_attempt"),
    ],
)
def test_what_only_the_run_knows_is_refused_when_parsed(text: str, refused: str) -> None:
    with pytest.raises(WorkflowSpecError) as caught:
        name_expression(FileContext("f.yml"), text, 3, "jobs.a.environment", [])
    error = caught.value.error
    assert (error.file, error.line, error.key) == ("f.yml", 3, "jobs.a.environment")
    assert error.message.startswith(refused) and "known only at run time" in error.message
