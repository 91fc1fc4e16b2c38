"""``leasehold runs list`` as a person reads it: on a 120-column terminal every run id is
whole (it is what they copy into ``runs get``), runs are shown by repository name, and each
has its number (``#``, GitHub's ``run_number``) beside its workflow."""

from __future__ import annotations

import json
import re

import pytest

from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import push_workflow, wait_for
from tests.cli_people.conftest import Person

pytestmark = pytest.mark.slow

WORKFLOW = """
name: listed
on: push
jobs:
  quick:
    runs-on: linux
    steps:
      - run: echo listed
"""
# What rich draws besides the text: colour codes, and the cursor hiding it may do.
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def test_runs_list_shows_whole_ids_and_repository_names(people_stack: CIStack) -> None:
    client = people_stack.new_tenant()
    key = client.headers["authorization"].removeprefix("Bearer ")
    me = Person(client.tenant_id, key, people_stack.base_url)  # type: ignore[attr-defined]
    first = push_workflow(people_stack, WORKFLOW, client=client, name="acme/widgets")
    second = push_workflow(people_stack, WORKFLOW, client=client, name="acme/gadgets")

    def listed() -> bool:
        page = json.loads(me.run("runs", "list", "--json").stdout)
        return {first.run_id, second.run_id} <= {r["id"] for r in page["data"]}

    assert wait_for("both runs in runs list", listed, timeout=30, interval=0.5)

    code, screen = me.run_in_terminal("runs", "list", columns=120)
    assert code == 0, screen
    text = _ESCAPE.sub("", screen)
    assert "┃" in text and "Traceback" not in text, text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 2}
    (head,) = [[cell.strip() for cell in line.split("┃")] for line in text.splitlines() if "┃ id" in line]
    for pushed, name in ((first, "acme/widgets"), (second, "acme/gadgets")):
        # The id whole, in its own cell, and the run's repository by name on its row.
        assert pushed.run_id in rows, (pushed.run_id, text)
        assert name in rows[pushed.run_id] and pushed.repo_id not in text, rows[pushed.run_id]
        # Each repository's first run of the file is number 1.
        assert [cell.strip() for cell in rows[pushed.run_id].split("│")][head.index("#")] == "1", text

    # Piped: the same columns, tab-separated; the repository named there too.
    piped = me.run("runs", "list")
    assert piped.returncode == 0, piped.stderr
    lines = [line.split("\t") for line in piped.stdout.splitlines()]
    assert lines[0][:3] == ["id", "status", "repo"], lines[0]
    by_id = {line[0]: line for line in lines[1:]}
    assert by_id[first.run_id][2] == "acme/widgets" and by_id[second.run_id][2] == "acme/gadgets", by_id
    number = lines[0].index("#")
    assert lines[0][number - 1] == "workflow" and by_id[first.run_id][number] == "1", lines

    # Filtered by full name: that repository's run only.
    only = me.run("runs", "list", "--repo", "acme/gadgets")
    assert only.returncode == 0, only.stderr
    assert [line.split("\t")[0] for line in only.stdout.splitlines()[1:]] == [second.run_id], only.stdout
