"""The import graph: no circles, and each layer imports only what DESIGN.md lets it.

Read from the source with ``ast``; nothing is imported, so the test is fast and cannot be
fooled by a module that happens to be loaded already. Imports under ``if TYPE_CHECKING:`` do
not run and are ignored. Circles are looked for among module-level imports (those run when a
module loads); the layer rules hold for function-level imports too.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from testing.harness import REPO_ROOT

PACKAGES = (
    "workflows",
    "activities",
    "api",
    "worker_gpu",
    "worker_ci",
    "cli",
    "orchestrator",
    "leasehold",
    "clients",
    "testing",
    "actions_language",
    "video_policy",
    "planning",
    "bench",
    "tests",
)

# Workflow definition modules: what activities must not import (they would load the
# workflow's code, and its sandbox rules, into the worker that runs side effects).
RUN_PARTS = (
    "run",
    "run_fields",
    "run_projection",
    "run_attempts",
    "run_graph",
    "run_slots",
    "run_groups",
    "run_rounds",
    "run_scheduling",
)
WORKFLOW_DEFINITIONS = frozenset(
    {"workflows.video.job", "workflows.ci.push", "workflows.ci.semaphore", "workflows.ci.reconcile"}
    # The run workflow and the parts its class is built from.
    | {f"workflows.ci.{m}" for m in RUN_PARTS}
)
# The activity modules a workflow may import (inside ``imports_passed_through``): activity
# definitions, for typed calls, and nothing that runs side effects at import.
ACTIVITY_DEFINITIONS = frozenset(
    {
        "activities.video.definitions",
        "activities.ci.definitions",
        "activities.fleet.definitions",
    }
)
# What workflows import besides themselves and the standard library.
WORKFLOW_THIRD_PARTY = frozenset({"pydantic", "temporalio"})
# Never on the path a workflow loads: heavy, nondeterministic, or side-effecting.
WORKFLOW_FORBIDDEN = frozenset({"yaml", "torch", "av", "boto3", "numpy", "subprocess"})
# Processes: nothing but the CLI (which starts them) and tests import these.
COMPOSITION_ROOTS = frozenset({"api.app", "api.main", "worker_gpu.main", "worker_ci.main", "orchestrator.main"})
# Shared infrastructure (leasehold) may import none of these: clients/ (code that starts
# workflows) and testing/ (tooling for tests and benchmarks) sit above it.
ABOVE_INFRASTRUCTURE = (
    "workflows",
    "activities",
    "api",
    "worker_gpu",
    "worker_ci",
    "cli",
    "orchestrator",
    "clients",
    "testing",
    "tests",
)
# The Actions language knows nothing of Temporal or of who runs it; the video policy returns
# decisions and knows nothing of HTTP (the API maps them) or of the planner that reads them.
PURE_PACKAGES = {
    "actions_language": (
        "temporalio",
        "activities",
        "api",
        "worker_gpu",
        "worker_ci",
        "cli",
        "orchestrator",
        "clients",
    ),
    "video_policy": ("api", "fastapi", "starlette", "planning", "worker_gpu", "worker_ci", "cli", "orchestrator"),
}
# The test stacks are not in the wheel: only tests, benchmarks and testing/ itself load them.
MAY_IMPORT_TESTING = ("testing", "tests", "bench")

# Violations known when this test was written, each being fixed in its own change; remove an
# entry when its import goes. (importer, imported module)
KNOWN_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    """One imported module, as written in ``importer``."""

    importer: str
    module: str
    line: int
    # Runs when the importer loads (not inside a function).
    module_level: bool
    # Inside ``with workflow.unsafe.imports_passed_through():``.
    passed_through: bool

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.module}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files(root: Path) -> dict[str, Path]:
    return {
        module_name(path, root): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_passed_through(item: ast.withitem) -> bool:
    call = item.context_expr
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "imports_passed_through"
    )


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(importer: str, path: Path, modules: Iterable[str]) -> Iterator[Import]:
    """Every import in ``path`` outside ``if TYPE_CHECKING:``; ``from a import b`` names the
    module ``a.b`` when that is a project module, else ``a``."""
    known = set(modules)
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, module_level: bool, passed: bool) -> Iterator[Import]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                yield from visit(statement, module_level, passed)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, node.lineno, module_level, passed)
            return
        if isinstance(node, ast.ImportFrom):
            base = _absolute(importer, is_package, node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield Import(importer, full if full in known else base, node.lineno, module_level, passed)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            module_level = False
        if isinstance(node, ast.With | ast.AsyncWith) and any(_is_passed_through(i) for i in node.items):
            passed = True
        for child in ast.iter_child_nodes(node):
            yield from visit(child, module_level, passed)

    yield from visit(ast.parse(path.read_text(), filename=str(path)), True, False)


def all_imports(root: Path = REPO_ROOT) -> tuple[dict[str, Path], list[Import]]:
    files = project_files(root)
    return files, [imp for name, path in files.items() for imp in imports_of(name, path, files)]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _top(module: str) -> str:
    return module.split(".")[0]


def loads(imp: Import, modules: Iterable[str]) -> list[str]:
    """The project modules an import runs: the module and the packages above it that are
    not the importer's own (those are already loading)."""
    known = set(modules)
    parts = imp.module.split(".")
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [m for m in chain if m in known and not _within(imp.importer, m)]


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle (as a path that returns to its start) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        # Iterative Tarjan: the graph is a few hundred modules, but recursion depth is not ours to spend.
        work = [(node, iter(sorted(edges.get(node, ()))))]
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[current])
                if low[current] == index[current]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    if len(component) > 1 or current in edges.get(current, ()):
                        components.append(component)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return [_cycle_path(sorted(c)[0], set(c), edges) for c in components]


def _cycle_path(start: str, members: set[str], edges: dict[str, set[str]]) -> list[str]:
    # Breadth-first from start back to start, staying inside the component: the shortest circle.
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, set()) & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no circle through {start}")


def layer_violations(files: dict[str, Path], imports: list[Import]) -> list[tuple[Import, str]]:
    """Every import that breaks a layer rule, with the rule it breaks."""
    stdlib = sys.stdlib_module_names
    found: list[tuple[Import, str]] = []
    for imp in imports:
        importer, module, top = imp.importer, imp.module, _top(imp.module)
        project = top in PACKAGES

        if _within(importer, "workflows"):
            if top in WORKFLOW_FORBIDDEN:
                found.append((imp, f"workflows never import {top}"))
            elif top == "activities":
                if not imp.passed_through:
                    found.append((imp, "workflows import activities only inside imports_passed_through()"))
                elif module not in ACTIVITY_DEFINITIONS:
                    found.append((imp, f"workflows import only activity definitions ({sorted(ACTIVITY_DEFINITIONS)})"))
            elif top != "workflows" and top not in stdlib and top not in WORKFLOW_THIRD_PARTY:
                found.append((imp, "workflows import only workflows, the standard library, pydantic and temporalio"))

        if _within(importer, "activities"):
            if module in WORKFLOW_DEFINITIONS:
                found.append((imp, "activities do not import workflow definitions"))
            elif top in ("api", "worker_gpu", "worker_ci", "cli", "orchestrator"):
                found.append((imp, f"activities do not import {top}"))

        if _within(importer, "leasehold") and top in ABOVE_INFRASTRUCTURE:
            found.append((imp, f"shared infrastructure (leasehold) does not import {top}"))

        for package, forbidden in PURE_PACKAGES.items():
            if _within(importer, package) and top in forbidden:
                found.append((imp, f"{package} does not import {top}"))

        if top == "testing" and project and not any(_within(importer, p) for p in MAY_IMPORT_TESTING):
            found.append((imp, "product code does not import testing/ (it is not in the wheel)"))

        is_root = module in COMPOSITION_ROOTS or _within(module, "cli")
        importer_may = _within(importer, "cli") or _within(importer, "tests") or importer in COMPOSITION_ROOTS
        if project and is_root and not importer_may:
            found.append((imp, "nothing but cli/ and tests/ imports a composition root"))

        if top == "tests" and not _within(importer, "tests"):
            found.append((imp, "only tests import tests"))

        if _within(importer, "api.routers") and _within(module, "api.routers") and module != "api.routers":
            found.append((imp, "a router imports no other router"))
    return [(imp, rule) for imp, rule in found if (imp.importer, imp.module) not in KNOWN_EXCEPTIONS]


def module_level_edges(files: dict[str, Path], imports: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in files}
    for imp in imports:
        if imp.module_level:
            edges[imp.importer].update(m for m in loads(imp, files) if m != imp.importer)
    return edges


def test_the_graph_is_read_from_every_package() -> None:
    files, imports = all_imports()
    # A parser that saw nothing would pass every rule below.
    for package in PACKAGES:
        assert any(_within(name, package) for name in files), package
    assert Import("workflows.video.job", "activities.video.definitions", 0, True, True) in {
        Import(i.importer, i.module, 0, i.module_level, i.passed_through) for i in imports
    }


def test_no_import_circles() -> None:
    files, imports = all_imports()
    cycles = find_cycles(module_level_edges(files, imports))
    assert not cycles, "import circles (module level):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layer_rules() -> None:
    files, imports = all_imports()
    broken = layer_violations(files, imports)
    assert not broken, "layer rules broken:\n" + "\n".join(f"{imp}: {rule}" for imp, rule in broken)


def test_known_exceptions_still_exist() -> None:
    # An exception whose import is gone must leave the list, or it would hide a new violation.
    _, imports = all_imports()
    stale = KNOWN_EXCEPTIONS - {(i.importer, i.module) for i in imports}
    assert not stale, f"fixed, remove from KNOWN_EXCEPTIONS: {sorted(stale)}"


# The GPU extra: only the GPU worker's model and encoder code (and tests, benchmarks) load it.
GPU_EXTRA_MODULES = frozenset({"torch", "diffusers", "transformers", "safetensors", "accelerate", "av", "numpy"})
# What the API process loads: its own package and what it imports, transitively.
API_ROOTS = ("api.main", "api.app")


def test_the_api_process_imports_no_gpu_extra() -> None:
    # Every import the API process can run (module level or in a function), followed through
    # project modules: none reaches torch, diffusers, transformers or PyAV.
    files, imports = all_imports()
    by_importer: dict[str, list[Import]] = {}
    for imp in imports:
        by_importer.setdefault(imp.importer, []).append(imp)
    seen: set[str] = set()
    todo = [m for m in API_ROOTS if m in files]
    found: list[str] = []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for imp in by_importer.get(module, []):
            if _top(imp.module) in GPU_EXTRA_MODULES:
                found.append(str(imp))
            todo.extend(m for m in loads(imp, files) if m not in seen)
    assert "api.routers.video.models" in seen and "workflows.video.catalogue" in seen
    assert not found, "the API process would import the gpu extra:\n" + "\n".join(found)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    # A circle, an activity importing a workflow, infrastructure importing the API, a workflow
    # importing yaml and an activity outside imports_passed_through, bench importing tests.
    sources = {
        "workflows/__init__.py": "",
        "workflows/a.py": "import yaml\nfrom activities import b\n",
        "activities/__init__.py": "",
        "activities/b.py": "from workflows.ci import run\n",
        "workflows/ci/__init__.py": "",
        "workflows/ci/run.py": "from workflows import a\n",
        "leasehold/__init__.py": "",
        # Under TYPE_CHECKING: ignored; in a function: a layer rule still holds.
        "leasehold/c.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import worker_ci.main\n"
            "def f():\n    import api.app\n"
        ),
        "bench/__init__.py": "from tests import d\n",
        "tests/__init__.py": "",
        "tests/d.py": "import bench\n",
        "api/__init__.py": "",
        "api/app.py": "from testing import stack\n",
        "testing/__init__.py": "",
        "testing/stack.py": "",
        **{f"{p}/__init__.py": "" for p in ("worker_gpu", "worker_ci", "cli", "orchestrator")},
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    files, imports = all_imports(tmp_path)
    cycles = find_cycles(module_level_edges(files, imports))
    assert sorted(map(tuple, cycles)) == [
        ("activities.b", "workflows.ci.run", "workflows.a", "activities.b"),
        ("bench", "tests.d", "bench"),
    ]
    rules = {(imp.importer, imp.module, rule.split(" ")[0]) for imp, rule in layer_violations(files, imports)}
    assert rules == {
        ("workflows.a", "yaml", "workflows"),
        ("workflows.a", "activities.b", "workflows"),
        ("activities.b", "workflows.ci.run", "activities"),
        ("leasehold.c", "api.app", "shared"),
        ("leasehold.c", "api.app", "nothing"),
        ("bench", "tests.d", "only"),
        ("api.app", "testing.stack", "product"),
    }
