"""Fixtures for actions: a directory of action mirrors (the operator's actions source) holding
small composite and JavaScript actions written here as real git repositories, and a CI stack
(real processes, real bubblewrap) whose workers take actions from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.ci_core.conftest import CIStack, engine_stack, git


def make_action_repo(mirrors: Path, name: str, files: dict[str, str], tag: str = "v1") -> str:
    """``<mirrors>/<owner>/<repo>`` as a git repository with ``files`` committed and tagged."""
    path = mirrors / name
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "action")
    git(path, "tag", tag)
    return git(path, "rev-parse", "HEAD")


# A composite action: inputs with a default, a nested JavaScript action, outputs mapped from
# its steps, ${{ github.action_path }} and $GITHUB_ACTION_PATH.
GREET_ACTION = """
name: greet
inputs:
  who:
    required: true
  greeting:
    default: hello
outputs:
  combined:
    value: ${{ steps.say.outputs.text }}+${{ steps.nested.outputs.greeting }}
runs:
  using: composite
  steps:
    - id: say
      shell: bash
      run: |
        test -f "${{ github.action_path }}/action.yml" && test "$GITHUB_ACTION_PATH" = "${{ github.action_path }}"
        echo "text=${{ inputs.greeting }} ${{ inputs.who }}" >> "$GITHUB_OUTPUT"
    - id: nested
      uses: acme/js@v1
      with:
        who name: nested-${{ inputs.who }}
"""

# A JavaScript action with pre, main and post: inputs, state, outputs, env.
JS_ACTION = """
name: js
inputs:
  who name:
    required: true
  tag:
    default: t-${{ github.ref_name }}
outputs:
  greeting:
    description: what main said
runs:
  using: node20
  pre: pre.js
  main: main.js
  post: post.js
"""
JS_PRE = """
const fs = require('fs');
fs.appendFileSync(process.env.GITHUB_STATE, 'from_pre=' + process.env.INPUT_WHO_NAME + '\\n');
console.log('js-pre ran for ' + process.env.INPUT_WHO_NAME);
"""
JS_MAIN = """
const fs = require('fs');
const who = process.env.INPUT_WHO_NAME;
console.log('js-main ran for ' + who + ' tag=' + process.env.INPUT_TAG + ' state=' + process.env.STATE_from_pre);
fs.appendFileSync(process.env.GITHUB_OUTPUT, 'greeting=hi ' + who + '\\n');
fs.appendFileSync(process.env.GITHUB_ENV, 'FROM_JS=' + who + '\\n');
fs.appendFileSync(process.env.GITHUB_STATE, 'from_main=' + who + '\\n');
"""
JS_POST = """
console.log('js-post ran for ' + process.env.INPUT_WHO_NAME + ' state=' + process.env.STATE_from_main);
"""

# Tries to reach what a job must never reach; prints what happened to each attempt.
ATTACK_ACTION = """
name: attack
inputs:
  data-dir:
    required: true
runs:
  using: node24
  main: attack.js
"""
ATTACK_JS = """
const fs = require('fs');
const path = require('path');
function attempt(name, fn) {
  try { fn(); console.log('ATTACK ' + name + ' SUCCEEDED'); }
  catch (e) { console.log('attack ' + name + ' refused: ' + e.code); }
}
const dataDir = process.env['INPUT_DATA-DIR'];
attempt('read-shadow', () => fs.readFileSync('/etc/shadow'));
attempt('read-data-dir', () => fs.readdirSync(dataDir));
attempt('read-host-root', () => fs.readdirSync('/root'));
attempt('write-action', () => fs.writeFileSync(path.join(process.env.GITHUB_ACTION_PATH, 'attack.js'), 'x'));
attempt('add-to-action', () => fs.writeFileSync(path.join(process.env.GITHUB_ACTION_PATH, 'pwned'), 'x'));
attempt('write-usr', () => fs.writeFileSync('/usr/pwned', 'x'));
attempt('write-job-root', () => fs.writeFileSync('/ci/pwned', 'x'));
attempt('write-data-dir', () => fs.writeFileSync(path.join(dataDir, 'pwned'), 'x'));
attempt('read-planted-link', () => fs.readFileSync(path.join(process.env.GITHUB_ACTION_PATH, 'shadow-link')));
attempt('list-planted-link', () => fs.readdirSync(path.join(process.env.GITHUB_ACTION_PATH, 'root-link')));
console.log('uid=' + process.getuid());
"""

DOCKER_ACTION = """
name: in a container
runs:
  using: docker
  image: Dockerfile
"""


@pytest.fixture(scope="module")
def action_mirrors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mirrors = tmp_path_factory.mktemp("action-mirrors")
    make_action_repo(mirrors, "acme/greet", {"action.yml": GREET_ACTION})
    make_action_repo(
        mirrors, "acme/js", {"action.yml": JS_ACTION, "pre.js": JS_PRE, "main.js": JS_MAIN, "post.js": JS_POST}
    )
    make_action_repo(mirrors, "acme/attack", {"action.yml": ATTACK_ACTION, "attack.js": ATTACK_JS})
    # Links in the action's own tree: extracted as links (never followed by the worker), and
    # inside the sandbox they lead nowhere.
    attack = mirrors / "acme/attack"
    (attack / "shadow-link").symlink_to("/etc/shadow")
    (attack / "root-link").symlink_to("/root")
    git(attack, "add", "-A")
    git(attack, "commit", "-q", "-m", "links")
    git(attack, "tag", "-f", "v1")
    make_action_repo(mirrors, "acme/container", {"action.yml": DOCKER_ACTION})
    return mirrors


@pytest.fixture(scope="module")
def actions_stack(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory, action_mirrors: Path
) -> Iterator[CIStack]:
    with engine_stack(temporal_env, tmp_path_factory.mktemp("ci"), ci_actions_source=str(action_mirrors)) as stack:
        yield stack
