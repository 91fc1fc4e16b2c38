"""What a ``uses:`` may name and what an ``action.yml`` may hold: table-driven refusals with the
file, line and key, checked by the parsers alone (no git, no network)."""

from __future__ import annotations

import pytest

from actions_language.action_refs import ActionRef, ActionRefError, parse_uses
from actions_language.actions import parse_action
from actions_language.parser import parse_workflow
from actions_language.schema import WorkflowSpecError


@pytest.mark.parametrize(
    ("uses", "expected"),
    [
        ("./local-action", ActionRef(local=True, path="local-action")),
        ("./a/b/", ActionRef(local=True, path="a/b")),
        ("./", ActionRef(local=True, path="")),
        ("acme/tool@v1", ActionRef(local=False, path="", owner="acme", repo="tool", ref="v1")),
        ("acme/tool/sub/dir@main", ActionRef(local=False, path="sub/dir", owner="acme", repo="tool", ref="main")),
        ("a-b/c.d_e@release/1.x", ActionRef(local=False, path="", owner="a-b", repo="c.d_e", ref="release/1.x")),
        ("acme/tool@" + "a" * 40, ActionRef(local=False, path="", owner="acme", repo="tool", ref="a" * 40)),
    ],
)
def test_accepted_references(uses: str, expected: ActionRef) -> None:
    assert parse_uses(uses) == expected


@pytest.mark.parametrize(
    ("uses", "words"),
    [
        # Local paths and URLs the worker must never be pointed at.
        ("/etc/passwd@v1", "owner/repo"),
        ("../other-repo", "owner/repo"),
        ("./../../etc", "'..'"),
        ("./a/../../b", "'..'"),
        ("file:///etc@v1", "owner/repo"),
        ("https://127.0.0.1/x/y@v1", "owner/repo"),
        ("127.0.0.1:8080/x@v1", "owner/repo"),
        ("acme/../x@v1", "owner/repo"),
        ("acme/x/../../y@v1", "'..'"),
        ("acme/x y@v1", "owner/repo"),
        # Refs that would be git options or leave refs/.
        ("acme/x@-c", "not a valid git ref"),
        ("acme/x@--upload-pack=evil", "not a valid git ref"),
        ("acme/x@../../HEAD", "not a valid git ref"),
        ("acme/x@a b", "not a valid git ref"),
        ("acme/x@", "owner/repo"),
        ("acme/x", "owner/repo"),
        ("./local@v1", "no '@ref'"),
        ("acme/x@${{ github.sha }}", "must be literal"),
        ("docker://alpine:3", "Docker actions are not supported"),
        ("DOCKER://alpine", "Docker actions are not supported"),
    ],
)
def test_refused_references_name_the_step(uses: str, words: str) -> None:
    with pytest.raises(ActionRefError):
        parse_uses(uses)
    text = f"on: push\njobs:\n  a:\n    runs-on: linux\n    steps:\n      - run: echo\n      - uses: '{uses}'\n"
    with pytest.raises(WorkflowSpecError) as caught:
        parse_workflow(".github/workflows/w.yml", text)
    error = caught.value.error
    assert (error.file, error.line, error.key) == (".github/workflows/w.yml", 7, "jobs.a.steps[1].uses")
    assert words in error.message, error.message


COMPOSITE = """name: c
inputs:
  who: {required: true}
outputs:
  said: {value: "${{ steps.s.outputs.said }}"}
runs:
  using: composite
  steps:
    - id: s
      shell: bash
      run: echo "said=${{ inputs.who }}" >> "$GITHUB_OUTPUT"
"""
NODE = """name: n
runs:
  using: node20
  main: dist/index.js
  post: post.js
  post-if: failure()
"""


def test_actions_parse() -> None:
    composite = parse_action("action.yml", COMPOSITE.encode(), "acme/c", "a" * 40, "")
    assert composite.is_composite and composite.inputs["who"].required
    assert composite.outputs == {"said": "${{ steps.s.outputs.said }}"}
    assert composite.steps[0].shell == "bash" and composite.steps[0].id == "s"
    node = parse_action("action.yml", NODE.encode(), None, None, "x")
    assert (node.using, node.main, node.post, node.post_if, node.pre) == (
        "node20",
        "dist/index.js",
        "post.js",
        "failure()",
        None,
    )


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        (COMPOSITE.replace("      shell: bash\n", ""), 9, "runs.steps[0].shell", "needs 'shell'"),
        (COMPOSITE.replace("shell: bash", "shell: pwsh"), 10, "runs.steps[0].shell", "shell"),
        (COMPOSITE.replace("composite", "docker"), 7, "runs.using", "Docker actions are not supported"),
        (COMPOSITE.replace("composite", "node12"), 7, "runs.using", "unsupported runtime"),
        (COMPOSITE.replace("inputs.who", "secrets.TOKEN"), 11, "runs.steps[0].run", "'secrets' is not available"),
        (COMPOSITE.replace('{value: "${{ steps.s.outputs.said }}"}', "{}"), 5, "outputs.said", "needs 'value'"),
        (COMPOSITE + "    - uses: actions/cache@v4\n", 12, "runs.steps[1].uses", "job steps only"),
        (COMPOSITE + "    - uses: docker://x\n", 12, "runs.steps[1].uses", "Docker"),
        (COMPOSITE + "    - run: echo\n      shell: sh\n      with: {a: b}\n", 14, "runs.steps[1].with", "'with'"),
        (NODE.replace("  main: dist/index.js\n", ""), 3, "runs.main", "needs 'main'"),
        (NODE.replace("dist/index.js", "../../etc/passwd"), 4, "runs.main", "action's directory"),
        (NODE.replace("dist/index.js", "/etc/passwd"), 4, "runs.main", "action's directory"),
        (NODE.replace("failure()", "secrets.X"), 6, "runs.post-if", "not available"),
        (NODE + "branding: {icon: x}\nextra: 1\n", 8, "extra", "unsupported key"),
        # Anchors and aliases are read (as in workflow files); merge keys are not.
        ("x: &b {using: node20}\nruns:\n  <<: *b\n  main: x.js\n", 3, None, "merge keys"),
        ("[not, a, mapping]\n", 1, None, "must be a mapping"),
    ],
)
def test_action_refusals_name_line_and_key(text: str, line: int, key: str | None, words: str) -> None:
    with pytest.raises(WorkflowSpecError) as caught:
        parse_action("action.yml", text.encode(), None, None, "")
    error = caught.value.error
    assert (error.line, error.key) == (line, key), error
    assert words in error.message, error.message


@pytest.mark.parametrize("data", [b"\xff\xfe", b"a: [" * 200, b"x" * (600 * 1024), b"runs: !!int x\n"])
def test_action_parser_raises_only_its_own_error(data: bytes) -> None:
    with pytest.raises(WorkflowSpecError):
        parse_action("action.yml", data, None, None, "")
