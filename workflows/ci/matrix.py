"""A job's ``strategy.matrix`` expanded into its combinations, by GitHub's rules.

Pure and deterministic (no I/O): the parser expands every matrix it can at parse time (no
expressions) to refuse empty or oversized ones with the file's line, and the run workflow can
expand the evaluated one the same way when it creates the jobs.

GitHub's rules: the cartesian product of the axes (first axis slowest), less every combination
an ``exclude`` entry matches (a partial match is enough), then each ``include`` entry is added
to every base combination whose *original* axis values it does not change (values added by an
earlier include may be overwritten); an entry that fits no combination becomes one of its own.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workflows.ci.expressions import (
    ExpressionError,
    StatusFunctions,
    evaluate,
    find_interpolations,
    interpolate,
    parse,
    to_text,
    truthy,
)
from workflows.ci.types.spec import StrategySpec

# Most combinations one run may create across its matrix jobs (GitHub's per-matrix limit; it
# also bounds the run's history: every combination is a job).
MAX_RUN_COMBINATIONS = 256
# Longest combination name kept (the rest is cut, with "..."); the read model keeps 255.
MAX_NAME_CHARS = 200
# Most bytes (as JSON) all combinations of one matrix (and of one run) may hold: every
# combination's values are kept in the run's state, and a small matrix from ``fromJSON`` can
# multiply into a large one.
MAX_MATRIX_BYTES = 256 * 1024


class MatrixError(ValueError):
    """A matrix that cannot be expanded (no combinations, or too many)."""


def _norm(value: Any) -> Any:
    """A value as GitHub compares it: numbers are doubles, mappings and lists compare deeply."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return ("num", float(value) if math.isfinite(value) else repr(value))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), _norm(v)) for k, v in value.items())))
    if isinstance(value, Sequence):
        return ("seq", tuple(_norm(v) for v in value))
    return ("other", repr(value))


def _same(a: Any, b: Any) -> bool:
    # _norm keeps booleans apart from numbers (bool is an int in Python, not in JSON).
    return bool(_norm(a) == _norm(b))


def expand_matrix(
    axes: Mapping[str, Sequence[Any]],
    include: Sequence[Mapping[str, Any]] = (),
    exclude: Sequence[Mapping[str, Any]] = (),
    limit: int = 256,
    max_bytes: int = MAX_MATRIX_BYTES,
) -> list[dict[str, Any]]:
    """Every combination, in GitHub's order; ``MatrixError`` when there is none or more than ``limit``."""
    size = 1
    for values in axes.values():
        size *= len(values)
        if size > limit * 64:
            # Excludes could bring it back under the limit, but not from this far.
            raise MatrixError(f"the matrix has more than {limit} combinations")
    base: list[dict[str, Any]] = (
        [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())] if axes else []
    )
    base = [c for c in base if not any(all(k in c and _same(c[k], v) for k, v in e.items()) for e in exclude)]
    extra: list[dict[str, Any]] = []
    for entry in include:
        fitted = False
        for combo in base:
            if all(_same(combo[k], v) for k, v in entry.items() if k in axes):
                combo.update(entry)
                fitted = True
        if not fitted:
            extra.append(dict(entry))
    combos = base + extra
    if not combos:
        raise MatrixError("the matrix has no combinations (every one is excluded, or it defines none)")
    if len(combos) > limit:
        raise MatrixError(f"the matrix has {len(combos)} combinations (at most {limit})")
    size = sum(len(json.dumps(c, default=str)) for c in combos)
    if size > max_bytes:
        raise MatrixError(f"the matrix's combinations hold {size} bytes (at most {max_bytes})")
    return combos


# In the run: evaluating a strategy, naming and aggregating combinations --------------------------


def evaluate_value(text: str, context: dict[str, Any]) -> Any:
    """A value that is wholly one ``${{ }}`` yields what the expression yields (``fromJSON``
    gives lists and mappings); any other text is interpolated into a string."""
    stripped = text.strip()
    spans = find_interpolations(stripped)
    if len(spans) == 1 and spans[0][0] == 0 and spans[0][1] == len(stripped):
        return evaluate(parse(spans[0][2]), context, StatusFunctions())
    return interpolate(text, context) if "${{" in text else text


def evaluate_minutes(text: str, context: dict[str, Any], cap: float) -> float:
    """A ``timeout-minutes`` written as ``${{ }}`` (a job's or a step's), capped at ``cap``;
    ``ExpressionError`` when it is no positive number."""
    minutes = evaluate_value(text, dict(context))
    try:
        number = float(minutes)
    except (TypeError, ValueError):
        number = math.nan
    if not number > 0:
        raise ExpressionError(f"timeout-minutes evaluated to {minutes!r}, not a positive number")
    return min(number, cap)


def _deep(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return evaluate_value(value, context)
    if isinstance(value, list):
        return [_deep(v, context) for v in value]
    if isinstance(value, dict):
        return {k: _deep(v, context) for k, v in value.items()}
    return value


def _entry_list(value: Any, what: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise MatrixError(f"{what} must be a list of mappings")
    return [{str(k): v for k, v in e.items()} for e in value]


@dataclass
class ResolvedStrategy:
    """A strategy whose expressions were evaluated: its combinations, fail-fast and max-parallel."""

    combinations: list[dict[str, Any]]
    fail_fast: bool
    max_parallel: int | None


def resolve_strategy(
    strategy: StrategySpec, context: dict[str, Any], limit: int = 256, max_bytes: int = MAX_MATRIX_BYTES
) -> ResolvedStrategy:
    """Evaluate ``fromJSON(...)`` and other expressions of a strategy where GitHub does (when the
    job is ready: ``github``, ``needs``, ``inputs``), then expand it. Raises ``MatrixError`` or
    ``ExpressionError`` with a message for the job's error."""
    if strategy.matrix_expression is not None:
        whole = evaluate_value(strategy.matrix_expression, context)
        if not isinstance(whole, dict):
            raise MatrixError("strategy.matrix must evaluate to a mapping")
        raw: dict[str, Any] = {str(k): v for k, v in whole.items()}
    else:
        raw = {name: _deep(values, context) for name, values in strategy.axes.items()}
        raw["include"] = _deep(strategy.include, context) if strategy.include else None
        raw["exclude"] = _deep(strategy.exclude, context) if strategy.exclude else None
    include = _entry_list(raw.pop("include", None), "strategy.matrix.include")
    exclude = _entry_list(raw.pop("exclude", None), "strategy.matrix.exclude")
    axes: dict[str, list[Any]] = {}
    for name, values in raw.items():
        if not isinstance(values, list) or not values:
            raise MatrixError(f"strategy.matrix.{name} must be a non-empty list")
        axes[name] = values
    for entry in exclude:
        for name in entry:
            if name not in axes:
                raise MatrixError(f"exclude names {name!r}, which is not an axis of the matrix")
    combos = expand_matrix(axes, include, exclude, limit, max_bytes)
    fail_fast = strategy.fail_fast
    if isinstance(fail_fast, str):
        fail_fast = truthy(evaluate_value(fail_fast, context))
    max_parallel = strategy.max_parallel
    if isinstance(max_parallel, str):
        evaluated = evaluate_value(max_parallel, context)
        try:
            max_parallel = int(float(evaluated))
        except (TypeError, ValueError):
            raise MatrixError(f"strategy.max-parallel must be a positive integer, not {evaluated!r}") from None
        if max_parallel < 1:
            raise MatrixError("strategy.max-parallel must be a positive integer")
    return ResolvedStrategy(combinations=combos, fail_fast=bool(fail_fast), max_parallel=max_parallel)


def combination_name(name: str, matrix: Mapping[str, Any], context: dict[str, Any]) -> str:
    """The name GitHub shows for one combination: a ``name:`` that uses expressions is
    interpolated (with ``matrix`` in its context); otherwise the values follow in brackets,
    ``build (ubuntu, 18)``."""
    if "${{" in name:
        shown = interpolate(name, {**context, "matrix": dict(matrix)})
    elif not matrix:
        shown = name
    else:
        shown = f"{name} ({', '.join(to_text(v) for v in matrix.values())})"
    # Every combination's name is kept in the run's state: an expression must not make it huge.
    return shown if len(shown) <= MAX_NAME_CHARS else shown[: MAX_NAME_CHARS - 3] + "..."


def combination_ids(job_id: str, count: int, taken: set[str], start: int = 1) -> list[str]:
    """``<job>-<n>`` (n from 1) for each combination: safe in object-store keys and the API's
    job paths. An id another job already has (a job literally named ``build-2``) gets ``_``
    appended until it is unique (compared without case, as job ids are)."""
    used = {t.lower() for t in taken}
    out: list[str] = []
    for n in range(start, start + count):
        candidate = f"{job_id}-{n}"
        while candidate.lower() in used:
            candidate += "_"
        used.add(candidate.lower())
        out.append(candidate)
    return out


def aggregate_result(results: Sequence[str]) -> str:
    """``needs.<job>.result`` of a matrix job from its combinations' results (each ``success``,
    ``failure``, ``cancelled`` or ``skipped``; a failure allowed by ``continue-on-error`` counts
    as ``success``): failure if any failed, else cancelled if any was cancelled, skipped if all
    were skipped, else success."""
    if any(r == "failure" for r in results):
        return "failure"
    if any(r == "cancelled" for r in results):
        return "cancelled"
    if results and all(r == "skipped" for r in results):
        return "skipped"
    return "success"
