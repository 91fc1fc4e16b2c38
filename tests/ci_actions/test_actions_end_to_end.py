"""Actions end to end on real processes: a local action, a composite action nesting a
JavaScript one, a JavaScript action with pre/post, an action that attacks the host, and the
refusals a push gets for actions that cannot run here."""

from __future__ import annotations

from pathlib import Path

from tests.ci_actions.conftest import ATTACK_JS
from tests.ci_core.conftest import CIStack, git
from workflows.ci.types.run import JobStatus, RunStatus

LOCAL_ACTION = """
name: local
inputs:
  who: {required: true}
outputs:
  said:
    value: ${{ steps.run.outputs.said }}
runs:
  using: composite
  steps:
    - id: run
      shell: sh
      run: sh "${{ github.action_path }}/hello.sh" "${{ inputs.who }}"
"""
LOCAL_SCRIPT = 'echo "local says hi to $1"\necho "said=hi $1" >> "$GITHUB_OUTPUT"\n'

WORKFLOW = """
on: push
jobs:
  build:
    runs-on: linux
    outputs:
      local: ${{ steps.local.outputs.said }}
      greet: ${{ steps.greet.outputs.combined }}
      js: ${{ steps.js.outputs.greeting }}
    steps:
      - uses: actions/checkout@v4
      - id: local
        uses: ./local-action
        with:
          who: local-user
      - id: greet
        uses: acme/greet@v1
        with:
          who: composite-user
      - id: js
        uses: acme/js@v1
        with:
          who name: js-user
      - run: echo "last step saw FROM_JS=$FROM_JS"
  post-after-failure:
    runs-on: linux
    steps:
      - uses: acme/js@v1
        with:
          who name: failing-job
      - run: echo "the job fails now"; exit 3
"""

ATTACK = """
on: push
jobs:
  attack:
    runs-on: linux
    steps:
      - uses: acme/attack@v1
        with:
          data-dir: {data_dir}
"""


def action_mirrors_sha(stack: CIStack, name: str) -> str:
    """The commit tag v1 of an action in the test's actions source points at."""
    return git(Path(stack.settings.ci_actions_source) / name, "rev-parse", "v1^{commit}")


def _order(text: str, *needles: str) -> list[int]:
    positions = [text.find(n) for n in needles]
    assert all(p >= 0 for p in positions), (needles, text)
    return positions


async def test_local_composite_and_javascript_actions_run_with_outputs(actions_stack: CIStack) -> None:
    repo = actions_stack.repo("uses")
    sha = repo.commit(
        {
            "local-action/action.yml": LOCAL_ACTION,
            "local-action/hello.sh": LOCAL_SCRIPT,
            ".github/workflows/ci.yml": WORKFLOW,
        }
    )
    push = await actions_stack.push(repo, sha)
    assert len(push.runs) == 1, push
    run = await actions_stack.wait_run(push.runs[0].run_id, within=180)
    assert run.status == RunStatus.FAILURE, run  # the post-after-failure job fails on purpose
    build = run.job("build")
    assert build is not None
    attempt = build.current_attempt()
    assert attempt is not None
    text = actions_stack.log_text(attempt.log_prefix)
    assert build.status == JobStatus.SUCCESS, text
    assert build.outputs == {
        "local": "hi local-user",
        "greet": "hello composite-user+hi nested-composite-user",
        "js": "hi js-user",
    }
    assert "local says hi to local-user" in text
    assert "js-main ran for js-user tag=t-main state=js-user" in text
    assert "last step saw FROM_JS=js-user" in text
    assert f"acme/js@v1 is commit {action_mirrors_sha(actions_stack, 'acme/js')}" in text
    # pre before main, main before the next step; posts after the last step, newest first.
    pre, main, last, post_js, post_nested = _order(
        text,
        "js-pre ran for js-user",
        "js-main ran for js-user",
        "last step saw FROM_JS",
        "js-post ran for js-user state=js-user",
        "js-post ran for nested-composite-user state=nested-composite-user",
    )
    assert pre < main < last < post_js < post_nested, text

    failing = run.job("post-after-failure")
    assert failing is not None and failing.status == JobStatus.FAILURE
    failed_attempt = failing.current_attempt()
    assert failed_attempt is not None
    failed_text = actions_stack.log_text(failed_attempt.log_prefix)
    fail_at, post_at = _order(failed_text, "the job fails now", "js-post ran for failing-job")
    assert fail_at < post_at, failed_text


async def test_an_action_cannot_reach_the_host(actions_stack: CIStack, action_mirrors: Path) -> None:
    data_dir = actions_stack.settings.data_dir
    repo = actions_stack.repo("attack")
    sha = repo.commit({".github/workflows/attack.yml": ATTACK.format(data_dir=data_dir)})
    push = await actions_stack.push(repo, sha)
    run = await actions_stack.wait_run(push.runs[0].run_id, within=120)
    job = run.job("attack")
    assert job is not None and job.status == JobStatus.SUCCESS, run
    attempt = job.current_attempt()
    assert attempt is not None
    text = actions_stack.log_text(attempt.log_prefix)
    assert "SUCCEEDED" not in text, text
    for name in (
        "read-shadow",
        "read-data-dir",
        "read-host-root",
        "write-action",
        "add-to-action",
        "write-usr",
        "write-job-root",
        "write-data-dir",
        "read-planted-link",
        "list-planted-link",
    ):
        assert f"attack {name} refused: E" in text, (name, text)
    assert "uid=0" not in text and "uid=" in text
    # Nothing changed on the host: the data dir, the mirrored action, the worker's copies.
    assert not (data_dir / "pwned").exists()
    assert (action_mirrors / "acme/attack/attack.js").read_text() == ATTACK_JS
    assert not list(data_dir.rglob("pwned"))


REFUSED = {
    "unknown-ref.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - run: echo first\n"
        "      - uses: acme/js@no-such-tag\n        with: {who name: x}\n",
        ".github/workflows/unknown-ref.yml:7: jobs.a.steps[1].uses: action 'acme/js@no-such-tag': "
        "acme/js has no tag, branch or commit 'no-such-tag'",
    ),
    "docker-action.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - uses: acme/container@v1\n",
        ".github/workflows/docker-action.yml:6: jobs.a.steps[0].uses: action 'acme/container@v1': acme/container@",
    ),
    "docker-uses.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - uses: docker://alpine:3\n",
        ".github/workflows/docker-uses.yml:6: jobs.a.steps[0].uses: action 'docker://alpine:3': "
        "Docker actions are not supported",
    ),
    "missing-repo.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - uses: acme/nothing@v1\n",
        ".github/workflows/missing-repo.yml:6: jobs.a.steps[0].uses: action 'acme/nothing@v1': "
        "acme/nothing could not be fetched from the actions source",
    ),
    "local-missing.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - uses: ./not-here\n",
        ".github/workflows/local-missing.yml:6: jobs.a.steps[0].uses: action './not-here': "
        "no action.yml or action.yaml",
    ),
    "local-link.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - uses: ./linked\n",
        ".github/workflows/local-link.yml:6: jobs.a.steps[0].uses: action './linked': no action.yml or action.yaml",
    ),
    "required-input.yml": (
        "on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - uses: acme/js@v1\n",
        ".github/workflows/required-input.yml:6: jobs.a.steps[0].uses: action 'acme/js@v1': "
        "input 'who name' is required",
    ),
}


async def test_actions_that_cannot_run_are_refused_at_push_time(actions_stack: CIStack) -> None:
    repo = actions_stack.repo("refused")
    files = {f".github/workflows/{name}": text for name, (text, _) in REFUSED.items()}
    # A link planted where a local action's file would be: read from git, never followed.
    sha = repo.commit({**files, "linked/README": "x"})
    (repo.path / "linked" / "action.yml").symlink_to("/etc/passwd")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", "link")
    sha = git(repo.path, "rev-parse", "HEAD")
    push = await actions_stack.push(repo, sha)
    runs = {r.workflow_path.rsplit("/", 1)[-1]: r.run_id for r in push.runs}
    assert sorted(runs) == sorted(REFUSED), push
    for name, (_, expected) in REFUSED.items():
        run = await actions_stack.wait_run(runs[name])
        assert run.status == RunStatus.FAILURE, (name, run)
        assert run.error is not None and run.error.startswith(expected), (name, run.error)
    docker = await actions_stack.wait_run(runs["docker-action.yml"])
    assert docker.error is not None and "runs.using: Docker actions are not supported" in docker.error
