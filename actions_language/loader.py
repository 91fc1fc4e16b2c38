"""Reading a workflow (or action) file's YAML as GitHub does: YAML 1.2 booleans and numbers,
the line of every mapping, key and list item, duplicate keys refused, and bounds on nesting and
alias expansion so a hostile file fails with a YAML error instead of exhausting the parser."""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

MAX_WORKFLOW_BYTES = 512 * 1024

# Deepest YAML nesting read (GitHub's files are shallow; this keeps hostile ones from
# exhausting the parser's stack).
MAX_YAML_DEPTH = 64
# Most nodes a document may hold once its aliases are expanded (a real workflow has a few
# thousand; a "billion laughs" alias bomb has billions).
MAX_YAML_EXPANDED_NODES = 100_000


class YamlMap(dict):
    """A mapping that remembers the line of itself and of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class YamlList(list):
    line: int = 0
    item_lines: list[int]


class WorkflowLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans, line numbers and duplicate-key errors; reads anchors
    and aliases as GitHub does (since 2025-09-18; no merge keys), bounded so that an alias bomb
    or a recursive alias fails, refuses deep nesting, and turns every constructor failure into
    a YAML error."""

    _depth = 0

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expanded(node)
        return super().construct_document(node)

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        event = self.peek_event()
        depth = self._depth
        if depth >= MAX_YAML_DEPTH:
            message = f"nesting deeper than {MAX_YAML_DEPTH} levels"
            raise yaml.composer.ComposerError(None, None, message, event.start_mark)
        self._depth = depth + 1
        try:
            return yaml.composer.Composer.compose_node(self, parent, index)
        finally:
            self._depth = depth

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A tag the value does not fit (``!!bool test``, ``!!int x``, a huge ``!!float``) or any other
        # constructor failure becomes a YAML error at the node's line, never another exception.
        try:
            return yaml.constructor.SafeConstructor.construct_object(self, node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.tag.rsplit(':', 1)[-1]} value {str(node.value)[:40]!r}", node.start_mark
            ) from exc


def _check_expanded(root: yaml.Node) -> None:
    """Refuse a document whose aliases, expanded, would exceed ``MAX_YAML_EXPANDED_NODES`` nodes
    or ``MAX_YAML_DEPTH`` levels, or refer to themselves. Each node is measured once (aliases
    share their anchor's node), so the check costs what the text does, not what it expands to."""
    sizes: dict[int, tuple[int, int]] = {}
    busy: set[int] = set()

    def measure(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in busy:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a node that contains it", node.start_mark)
        busy.add(key)
        size, depth = 1, 1
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        for child in children:
            child_size, child_depth = measure(child)
            size += child_size
            depth = max(depth, child_depth + 1)
            if size > MAX_YAML_EXPANDED_NODES or depth > MAX_YAML_DEPTH:
                what = (
                    f"more than {MAX_YAML_EXPANDED_NODES} nodes"
                    if size > MAX_YAML_EXPANDED_NODES
                    else (f"nesting deeper than {MAX_YAML_DEPTH} levels")
                )
                raise yaml.composer.ComposerError(None, None, f"aliases expand to {what}", node.start_mark)
        busy.discard(key)
        sizes[key] = (size, depth)
        return size, depth

    # Deep but legal documents stay far below the interpreter's recursion limit (MAX_YAML_DEPTH).
    measure(root)


# YAML 1.1 reads on/off/yes/no as booleans; GitHub (YAML 1.2) does not.
WorkflowLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:bool"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
WorkflowLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _construct_map(loader: WorkflowLoader, node: yaml.MappingNode) -> YamlMap:
    result = YamlMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.constructor.ConstructorError(
                None, None, "YAML merge keys ('<<') are not supported (GitHub does not read them)", key_node.start_mark
            )
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) or key is None:
            raise yaml.constructor.ConstructorError(None, None, "mapping keys must be scalars", key_node.start_mark)
        if key in result:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_list(loader: WorkflowLoader, node: yaml.SequenceNode) -> YamlList:
    result = YamlList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


# YAML 1.2 core schema numbers (GitHub's): no 1.1 octal '010', sexagesimal or '1_000'; '1e3'
# is a float without a dot.
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
    for _first in list(WorkflowLoader.yaml_implicit_resolvers):
        WorkflowLoader.yaml_implicit_resolvers[_first] = [
            (tag, rx) for tag, rx in WorkflowLoader.yaml_implicit_resolvers[_first] if tag != _tag
        ]
WorkflowLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
WorkflowLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def _construct_int(loader: WorkflowLoader, node: yaml.ScalarNode) -> int | float:
    text = str(loader.construct_scalar(node))
    if text.startswith("0x"):
        return int(text[2:], 16)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if not re.fullmatch(r"[-+]?[0-9]+", text):
        raise ValueError(f"not an integer: {text!r}")
    if len(text) > 4000:
        # GitHub reads numbers as doubles: an integer this long is +-Infinity.
        return -math.inf if text.startswith("-") else math.inf
    return int(text, 10)


WorkflowLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
WorkflowLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
WorkflowLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_list)
