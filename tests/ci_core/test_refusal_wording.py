"""Refusals of what GitHub accepts say so (issue 29): each names the file, line and key, and
says the feature is not supported here, not that the file is wrong. Input GitHub refuses too
keeps saying what is wrong with it."""

from __future__ import annotations

import re

import pytest

from actions_language.actions import parse_action
from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError

PATH = ".github/workflows/w.yml"
NOT_SUPPORTED = re.compile(r"not supported (here|by this deployment)")


def job(body: str = "", steps: str = "      - run: echo hi\n") -> str:
    return f"on: push\njobs:\n  a:\n    runs-on: linux\n{body}    steps:\n{steps}"


# (case, workflow text, line, key): each valid on GitHub, unsupported here.
GITHUB_VALID = [
    # A name's expressions are evaluated when the push is listed: what only the run knows is refused.
    ("environment name over matrix", job("    environment: ${{ matrix.target }}\n"), 5, "jobs.a.environment"),
    (
        "environment.name over strategy",
        job("    environment:\n      name: e-${{ strategy.job-index }}\n"),
        6,
        "jobs.a.environment.name",
    ),
    ("environment name with a space", job("    environment: Production EU\n"), 5, "jobs.a.environment"),
    ("pwsh", job(steps="      - run: echo\n        shell: pwsh\n"), 7, "jobs.a.steps[0].shell"),
    (
        "container --privileged",
        job("    container:\n      image: node:20\n      options: --privileged\n"),
        7,
        "jobs.a.container.options",
    ),
    (
        "container options Docker takes",
        job("    container:\n      image: node:20\n      options: --cpus 2\n"),
        7,
        "jobs.a.container.options",
    ),
    (
        "container volumes",
        job("    container:\n      image: node:20\n      volumes: [/data:/data]\n"),
        7,
        "jobs.a.container.volumes",
    ),
    (
        "container credentials",
        job("    container:\n      image: node:20\n      credentials: {username: u, password: p}\n"),
        7,
        "jobs.a.container.credentials",
    ),
    ("image of another registry", job("    container: ghcr.io/acme/app:1\n"), 5, "jobs.a.container"),
    (
        "container image expression",
        job("    container:\n      image: ${{ vars.IMAGE }}\n"),
        6,
        "jobs.a.container.image",
    ),
    (
        "actions/cache input",
        job(
            steps="      - uses: actions/cache@v4\n        with:\n          path: x\n          key: k\n"
            "          lookup-only: true\n"
        ),
        10,
        "jobs.a.steps[0].with.lookup-only",
    ),
    ("Docker action", job(steps="      - uses: docker://alpine:3\n"), 6, "jobs.a.steps[0].uses"),
]


@pytest.mark.parametrize(("text", "line", "key"), [c[1:] for c in GITHUB_VALID], ids=[c[0] for c in GITHUB_VALID])
def test_refusing_what_github_accepts_says_it_is_not_supported_here(text: str, line: int, key: str) -> None:
    with pytest.raises(WorkflowSpecError) as caught:
        parse_workflow(PATH, text)
    error = caught.value.error
    assert (error.file, error.line, error.key) == (PATH, line, key), error.render()
    assert NOT_SUPPORTED.search(error.message), error.render()
    assert str(caught.value).startswith(f"{PATH}:{line}: {key}: ")


ACTION = "name: c\nruns:\n  using: composite\n  steps:\n    - uses: actions/checkout@v4\n"


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        (ACTION, 5, "runs.steps[0].uses"),
        ("name: n\nruns:\n  using: node16\n  main: index.js\n", 3, "runs.using"),
        ("name: d\nruns:\n  using: docker\n  image: Dockerfile\n", 3, "runs.using"),
    ],
    ids=["checkout in a composite action", "node16 runtime", "Docker runtime"],
)
def test_action_refusals_of_what_github_runs_say_it_is_not_supported_here(text: str, line: int, key: str) -> None:
    with pytest.raises(WorkflowSpecError) as caught:
        parse_action("action.yml", text.encode(), "acme/c", "a" * 40, "")
    error = caught.value.error
    assert (error.file, error.line, error.key) == ("action.yml", line, key), error.render()
    assert NOT_SUPPORTED.search(error.message), error.render()


# (case, workflow text, key, what the message says): GitHub refuses these too.
INVALID = [
    ("negative timeout", job("    timeout-minutes: -1\n"), "jobs.a.timeout-minutes", "positive number"),
    ("unknown need", job("    needs: nowhere\n"), "jobs.a.needs", "unknown job"),
    ("continue-on-error text", job("    continue-on-error: maybe\n"), "jobs.a.continue-on-error", "true or false"),
    (
        "secrets in environment.url",
        job("    environment:\n      name: p\n      url: ${{ secrets.U }}\n"),
        "jobs.a.environment.url",
        "'secrets' is not available",
    ),
]


@pytest.mark.parametrize(("text", "key", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_input_says_what_is_wrong(text: str, key: str, words: str) -> None:
    with pytest.raises(WorkflowSpecError) as caught:
        parse_workflow(PATH, text)
    error = caught.value.error
    assert error.key == key and words in error.message, error.render()
    assert not NOT_SUPPORTED.search(error.message), error.render()
