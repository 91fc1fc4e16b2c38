"""``$RUNNER_TOOL_CACHE`` as the official ``@actions/tool-cache`` (what ``actions/setup-python``
and ``setup-node`` are built on) reads it: a JavaScript action bundled from npm finds the host's
Python and Node in a job's cache by version range, puts them first on ``PATH`` as setup-python
does, and finds nothing for a version the host lacks."""

from __future__ import annotations

import subprocess

from activities.ci.tool_cache import arch as tool_arch
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import job, log_text, push_workflow, wait_run
from tests.npm_cache import bundled_action

SOURCE = r"""
const path = require('path');
const tc = require('@actions/tool-cache');
const core = require('@actions/core');
const wanted = [['Python', process.env.INPUT_PYTHON], ['node', process.env.INPUT_NODE]];
for (const [tool, spec] of wanted) {
  const dir = tc.find(tool, spec);
  if (!dir) {
    console.log(`missing ${tool} ${spec}; cached: ${tc.findAllVersions(tool).join(',')}`);
    process.exit(1);
  }
  console.log(`found ${tool} ${spec} at ${dir}`);
  core.addPath(path.join(dir, 'bin'));
}
console.log(`absent=${tc.find('Python', '3.99') || 'none'}`);
"""

ACTION_YML = """name: tools
description: find tools in the runner's tool cache with @actions/tool-cache
inputs:
  python: {required: true}
  node: {required: true}
runs:
  using: node20
  main: dist/index.js
"""

WORKFLOW = """
on: push
jobs:
  tools:
    runs-on: linux
    steps:
      - uses: ./.github/actions/tools
        with: {python: "PY_MINOR", node: "NODE_MAJOR.x"}
      - run: |
          echo "python at $(command -v python) $(python --version)"
          echo "node at $(command -v node) $(node --version)"
          echo "cache=$RUNNER_TOOL_CACHE"
"""


def _version(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout.strip().lstrip("v")


def test_setup_actions_find_the_host_tools_in_the_tool_cache(ci_engine: CIStack) -> None:
    python = _version(["/usr/bin/python3", "-c", "import platform; print(platform.python_version())"])
    node = _version(["node", "--version"])
    arch = tool_arch()
    files = {
        ".github/actions/tools/action.yml": ACTION_YML.encode(),
        ".github/actions/tools/dist/index.js": bundled_action(
            "tool-cache-action-2.0.2", SOURCE, ["@actions/tool-cache@2.0.2", "@actions/core@1.11.1"]
        ),
    }
    workflow = WORKFLOW.replace("PY_MINOR", python.rsplit(".", 1)[0]).replace("NODE_MAJOR", node.split(".")[0])
    pushed = push_workflow(ci_engine, workflow, binary_files=files)
    run = wait_run(pushed.client, pushed.run_id, timeout=180)
    text = log_text(pushed.client, pushed.run_id, "tools")
    assert job(run, "tools")["status"] == "success", text
    cache = next(line.split("cache=", 1)[1].strip() for line in text.splitlines() if "cache=" in line)
    assert f"found Python {python.rsplit('.', 1)[0]} at {cache}/Python/{python}/{arch}" in text, text
    assert f"found node {node.split('.')[0]}.x at {cache}/node/{node}/{arch}" in text, text
    assert f"python at {cache}/Python/{python}/{arch}/bin/python Python {python}" in text, text
    assert f"node at {cache}/node/{node}/{arch}/bin/node v{node}" in text, text
    assert "absent=none" in text, text
