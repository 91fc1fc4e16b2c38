"""A workflow written for GitHub runs unchanged through a real ``git push`` and its signed
webhook: a matrix job whose combinations use a composite action (nesting a JavaScript one) and
a JavaScript action from the operator's actions source, write ``$GITHUB_ENV`` and
``$GITHUB_PATH``, and export outputs that a dependent job reads. Everything is checked over
the runs API: the combinations' names, the aggregated result and the outputs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.ci_actions.conftest import GREET_ACTION, JS_ACTION, JS_MAIN, JS_POST, JS_PRE, make_action_repo
from tests.ci_api.conftest import CIStack, running_ci_stack
from tests.ci_api.flows import job, log_text, runs_of_push, wait_run

WORKFLOW = """
name: GitHub workflow
on:
  push:
    branches: [main]
env:
  GREETING: hello
jobs:
  build:
    name: build ${{ matrix.flavour }}
    runs-on: linux
    strategy:
      matrix:
        flavour: [plain, fancy]
        include:
          - flavour: fancy
            extra: sparkles
    outputs:
      combined: ${{ steps.greet.outputs.combined }}
    steps:
      - uses: actions/checkout@v4
      - name: tools and env
        run: |
          mkdir -p "$HOME/bin"
          printf '#!/bin/sh\\necho "tool for $1"\\n' > "$HOME/bin/flavour-tool"
          chmod +x "$HOME/bin/flavour-tool"
          echo "$HOME/bin" >> "$GITHUB_PATH"
          echo "FLAVOUR_ENV=${{ matrix.flavour }}-env" >> "$GITHUB_ENV"
      - id: greet
        uses: acme/greet@v1
        with:
          who: ${{ matrix.flavour }}
      - id: js
        uses: acme/js@v1
        with:
          who name: js-${{ matrix.flavour }}
      - name: check
        run: |
          flavour-tool "${{ matrix.flavour }}"
          test "$FLAVOUR_ENV" = "${{ matrix.flavour }}-env"
          test "$FROM_JS" = "js-${{ matrix.flavour }}"
          echo "combination ${{ strategy.job-index }}/${{ strategy.job-total }} extra=${{ matrix.extra }}"
          echo "greet said ${{ steps.greet.outputs.combined }} js said ${{ steps.js.outputs.greeting }}"
  report:
    needs: build
    runs-on: linux
    steps:
      - run: |
          echo "build was ${{ needs.build.result }}; combined=${{ needs.build.outputs.combined }}"
          test "${{ needs.build.result }}" = success
"""


@pytest.fixture(scope="module")
def actions_stack(temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CIStack]:
    root = tmp_path_factory.mktemp("gh-workflow")
    mirrors = root / "actions"
    make_action_repo(mirrors, "acme/greet", {"action.yml": GREET_ACTION})
    make_action_repo(
        mirrors, "acme/js", {"action.yml": JS_ACTION, "pre.js": JS_PRE, "main.js": JS_MAIN, "post.js": JS_POST}
    )
    with running_ci_stack(temporal_env, root, ci_actions_source=str(mirrors)) as stack:
        stack.start_workers()
        yield stack


def test_matrix_composite_and_javascript_actions_through_the_webhook(actions_stack: CIStack) -> None:
    client = actions_stack.new_tenant()
    remote = actions_stack.git_remote()
    actions_stack.register(client, remote)
    remote.write("README.md", "hello\n")
    remote.write(".github/workflows/github.yml", WORKFLOW)
    remote.commit("a workflow written for GitHub")
    remote.push()

    delivery = remote.deliveries()[0]
    assert delivery.status in (200, 202), delivery
    run_ids = runs_of_push(client, delivery.answer)
    assert len(run_ids) == 1
    run = wait_run(client, run_ids[0], timeout=180)
    assert run["status"] == "success", run

    combos = [j for j in run["jobs"] if j["id"].startswith("build-")]
    assert sorted(j["name"] for j in combos) == ["build fancy", "build plain"], run["jobs"]
    assert all(j["status"] == "success" for j in combos)
    assert job(run, "build")["status"] == "success"
    # Outputs: each combination's composite action said hello to it, through the nested JS action.
    by_name = {j["name"]: j for j in combos}
    assert by_name["build plain"]["outputs"] == {"combined": "hello plain+hi nested-plain"}
    assert by_name["build fancy"]["outputs"] == {"combined": "hello fancy+hi nested-fancy"}
    assert job(run, "build")["outputs"]["combined"] in {"hello plain+hi nested-plain", "hello fancy+hi nested-fancy"}

    fancy = log_text(client, run["id"], by_name["build fancy"]["id"])
    assert "tool for fancy" in fancy
    assert "extra=sparkles" in fancy
    assert "greet said hello fancy+hi nested-fancy js said hi js-fancy" in fancy
    assert "js-post ran for js-fancy" in fancy
    plain = log_text(client, run["id"], by_name["build plain"]["id"])
    assert "tool for plain" in plain and "extra=\n" in plain

    report = log_text(client, run["id"], "report")
    assert "build was success; combined=hello " in report
