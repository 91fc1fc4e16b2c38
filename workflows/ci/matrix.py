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
import math
from collections.abc import Mapping, Sequence
from typing import Any


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
    return combos
