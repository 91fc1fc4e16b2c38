"""Reusable workflows, expanded where the file is read: a job that ``uses:`` a workflow of
this repository becomes that workflow's jobs, in the run's one graph of jobs, so the run
executes them as any other (no workflow of its own per call).

A called job ``build`` of a caller ``ci`` becomes job ``ci__build``, shown ``ci / build``
(GitHub's name), and its expressions are rewritten to mean in the run what they meant in the
called file: ``inputs.x`` is the caller's ``with.x`` (typed, defaulted, required), ``secrets.X``
the secret the caller passed (or the caller's own with ``secrets: inherit``; nothing else),
``needs.build`` the job it became; the called file's ``env`` replaces the caller's
(``JobSpec.workflow_env``: the caller's does not reach it); ``github`` stays the caller's run's.
A job after the caller reads ``needs.ci.outputs.o`` as the called file's
``on.workflow_call.outputs.o`` over the jobs it became, and ``needs.ci.result`` as their
combined result. Conditions become explicit over the results they depend on, so a called job
decides as it would in a run of its own, and never runs where its caller would not.

Another repository's workflow (``owner/repo/.github/workflows/f.yml@ref``) is expanded the same
way, read through the reader's ``other_repository`` (``CalledWorkflowReader``: the listing
resolves the ref through the operator's actions source to one commit, so every attempt runs the
file as listed). A ``./.github/workflows`` call inside it names a file of that repository at that
commit, as on GitHub. ``secrets: inherit`` passes the caller's secrets only to a workflow of the
caller's own repository: GitHub allows it within one organization or enterprise, which a
deployment cannot tell apart, so another repository gets only the secrets passed by name.

The caller's values are hostile: a called path is a file right under ``.github/workflows``
read from git at the commit (``read``), never from a checkout; cycles, nesting past GitHub's
ten levels, more than ``MAX_CALLS`` calls and more than ``MAX_JOBS_PER_WORKFLOW`` jobs in all
are refused naming the caller's key and line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import yaml

from actions_language.contexts import (
    JOB_DEFAULTS_CONTEXTS,
    JOB_IF_CONTEXTS,
    JOB_START_CONTEXTS,
    WORKFLOW_DEFAULTS_CONTEXTS,
    WORKFLOW_ENV_CONTEXTS,
    check_text,
    env_mapping,
    if_condition,
)
from actions_language.expression_rewrite import (
    aggregate_result,
    and_all,
    equals,
    literal_key,
    need_path,
    or_any,
    to_source,
)
from actions_language.jobs import JOB_KEYS, parse_job, permissions_spec
from actions_language.jobs import _has_expression as has_expression
from actions_language.jobs import _strategy as strategy_spec
from actions_language.loader import MAX_WORKFLOW_BYTES, WorkflowLoader, YamlList, YamlMap
from actions_language.reusable import CallDeclaration, CalledWorkflow, call_declaration, called_workflow
from actions_language.rewriting import RewriteError, Substitution, call_inputs, call_secrets, template_node
from actions_language.schema import (
    FileContext,
    check_job_id,
    check_keys,
    scalar_text,
    string_list,
)
from actions_language.steps import RunDefaults, parse_run_defaults
from workflows.ci.expressions import Node, parse, subnodes, uses_status_function
from workflows.ci.matrix import combination_name, expand_matrix
from workflows.ci.types.spec import MAX_JOBS_PER_WORKFLOW, JobSpec

# GitHub's limits (github.com): ten levels of workflows (the top-level caller and nine called
# ones), and at most 50 workflow calls from one top-level file, nested ones included.
MAX_CALL_DEPTH = 10
MAX_CALLS = 50
# Longest id a called job gets (``<caller>__<job>``, nested): it names logs and attempts.
MAX_FLAT_ID_CHARS = 200
CALLER_KEYS = {"name", "uses", "with", "secrets", "needs", "if", "permissions", "strategy"}
CALLED_WORKFLOW_KEYS = {"name", "run-name", "on", "env", "jobs", "defaults", "permissions"}
# A path -> its bytes at the commit (``None``: no such file, or larger than MAX_WORKFLOW_BYTES).
WorkflowReader = Callable[[str], bytes | None]
OTHER_REPOSITORIES_UNSUPPORTED = (
    "workflows of another repository are not supported on this deployment: it has no actions "
    "source to read them from (LEASEHOLD_CI_ACTIONS_SOURCE); call one of this repository's own: "
    "./.github/workflows/<file>.yml"
)


class CalledWorkflowUnavailable(Exception):
    """Why another repository's workflow cannot be read (safe to show the tenant)."""


@runtime_checkable
class CalledWorkflowReader(Protocol):
    """A ``WorkflowReader`` that also reads other repositories' workflows."""

    def __call__(self, path: str) -> bytes | None: ...

    def other_repository(self, repository: str, ref: str, path: str) -> tuple[str, bytes]:
        """``(commit sha, content)`` of ``path`` in ``repository`` at ``ref`` (a tag, branch or
        sha; the same ref always the same commit for one reader); raises
        ``CalledWorkflowUnavailable``."""
        ...


def load_document(ctx: FileContext, text: str | bytes) -> YamlMap:
    """A workflow file's YAML as a mapping; a ``WorkflowSpecError`` for anything else."""
    if isinstance(text, bytes):
        if len(text) > MAX_WORKFLOW_BYTES:
            raise ctx.fail(None, None, f"file is larger than {MAX_WORKFLOW_BYTES} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ctx.fail(None, None, "file is not UTF-8 text") from None
    try:
        doc = yaml.load(text, Loader=WorkflowLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ctx.fail(line, None, f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ctx.fail(None, None, f"invalid YAML: {exc}") from None
    if not isinstance(doc, YamlMap):
        raise ctx.fail(1, None, "a workflow file must be a mapping")
    return doc


def uses_workflows(doc: YamlMap) -> bool:
    """Whether some job of the file calls a reusable workflow."""
    jobs = doc.get("jobs")
    return isinstance(jobs, YamlMap) and any(isinstance(j, YamlMap) and "uses" in j for j in jobs.values())


@dataclass
class Unit:
    """A job of one file as the jobs after it see it: the run's jobs it became, its result
    and (for a caller) its outputs, as expressions over those jobs' ``needs``."""

    flat: list[str]
    result: Node
    outputs: dict[str, Node] | None = None
    plain: str | None = None


@dataclass
class Scope:
    """One file being expanded, and what its caller made of it (nothing, at the top)."""

    ctx: FileContext
    id_prefix: str = ""
    name_prefix: str = ""
    inputs: dict[str, Node] | None = None
    secrets: dict[str, Node] | None = None
    condition: Node | None = None
    needs: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    chain: tuple[str, ...] = ()
    # Where the file is, when not in the run's repository: ``owner/repo`` and its commit.
    repository: str | None = None
    sha: str | None = None

    @property
    def called(self) -> bool:
        return bool(self.id_prefix)


@dataclass(frozen=True)
class JobSite:
    """One job of a file being expanded (a plain job or a call), and what it stands on: the
    units of the jobs before it, those it needs directly, and those it follows through them."""

    scope: Scope
    units: dict[str, Unit]
    ancestors: list[str]
    needs: list[str]
    job_id: str
    raw: YamlMap
    line: int | None

    @property
    def where(self) -> str:
        return f"jobs.{self.job_id}"

    def flat(self, job_ids: list[str]) -> list[str]:
        """The run's jobs that ``job_ids`` (jobs of this file before this one) became."""
        return [f for j in job_ids for f in self.units[j.lower()].flat]

    def ancestor_results(self) -> list[Node]:
        return [self.units[a.lower()].result for a in self.ancestors]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def referenced_needs(node: Node) -> list[str]:
    """The job ids ``needs['<id>']`` names in ``node`` (literal keys)."""
    found: list[str] = []
    if node[0] == "prop" and node[1] == ("ctx", "needs") and (job_id := literal_key(node[2])) is not None:
        found.append(job_id)
    for part in subnodes(node):
        found.extend(referenced_needs(part))
    return found


def explicit_condition(node: Node | None, results: list[Node]) -> Node:
    """``node`` with its status functions spelled out over ``results`` (the jobs it follows):
    ``success()`` is none failed, was cancelled or skipped and the run goes on; ``failure()`` one
    failed; ``always()`` true. Without one, ``success() && node`` (GitHub's default)."""
    success = and_all([("not", ("call", "cancelled", [])), *[equals(r, "success") for r in results]])
    if node is None:
        return success
    if not uses_status_function(node):
        return ("and", success, node)
    failure = or_any([equals(r, "failure") for r in results])
    replaced = {"success": success, "failure": failure, "always": ("lit", True)}

    def walk(n: Node) -> Node:
        if n[0] == "call" and n[1] in replaced and not n[2]:
            return replaced[n[1]]
        return tuple(walk(p) if isinstance(p, tuple) else [walk(a) for a in p] if isinstance(p, list) else p for p in n)

    return walk(node)


class Expansion:
    """The jobs a top-level file becomes once its calls are expanded (``expand``)."""

    def __init__(self, read: WorkflowReader | None) -> None:
        self.read = read
        self.other = read if isinstance(read, CalledWorkflowReader) else None
        self.jobs: list[JobSpec] = []
        self.calls = 0
        self._docs: dict[str, YamlMap] = {}

    def expand(self, ctx: FileContext, doc: YamlMap, defaults: RunDefaults) -> list[JobSpec]:
        self.expand_file(Scope(ctx=ctx, chain=(ctx.path,)), doc, defaults)
        return self.jobs

    # One file -----------------------------------------------------------------------------

    def _order(self, ctx: FileContext, jobs_raw: YamlMap) -> tuple[list[str], dict[str, list[str]]]:
        """The file's job ids (checked) in an order where each follows what it needs, and each
        one's needs as declared; unknown needs and cycles are refused as ``check_graph`` does."""
        declared: dict[str, str] = {}
        needs: dict[str, list[str]] = {}
        for key in jobs_raw:
            line = jobs_raw.key_lines.get(key)
            job_id = scalar_text(ctx, key, line, "jobs")
            check_job_id(ctx, job_id, line)
            if job_id.lower() in declared:
                raise ctx.fail(line, f"jobs.{job_id}", f"duplicate job id {job_id!r} (ids are case-insensitive)")
            declared[job_id.lower()] = job_id
        for key, raw in jobs_raw.items():
            job_id = str(key)
            if not isinstance(raw, YamlMap):
                raise ctx.fail(jobs_raw.key_lines.get(key), f"jobs.{job_id}", "must be a mapping")
            nline = raw.key_lines.get("needs", raw.line)
            written = string_list(ctx, raw["needs"], nline, f"jobs.{job_id}.needs") if "needs" in raw else []
            for need in written:
                if need.lower() not in declared:
                    raise ctx.fail(nline, f"jobs.{job_id}.needs", f"unknown job {need!r}")
                if need.lower() == job_id.lower():
                    raise ctx.fail(nline, f"jobs.{job_id}.needs", "a job cannot need itself")
            needs[job_id] = _unique([declared[n.lower()] for n in written])
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(job_id: str, path: list[str]) -> None:
            if state.get(job_id) == 2:
                return
            if state.get(job_id) == 1:
                cycle = [*path[path.index(job_id) :], job_id]
                line = jobs_raw[path[-1]].key_lines.get("needs") if path else None
                raise ctx.fail(line, f"jobs.{path[-1]}.needs", "dependency cycle: " + " -> ".join(cycle))
            state[job_id] = 1
            for need in needs[job_id]:
                visit(need, [*path, job_id])
            state[job_id] = 2
            order.append(job_id)

        for key in jobs_raw:
            visit(str(key), [])
        return order, needs

    def expand_file(self, scope: Scope, doc: YamlMap, defaults: RunDefaults) -> dict[str, Unit]:
        """Every job of ``doc`` (a plain job, or a call expanded in place), as units by id."""
        ctx = scope.ctx
        jobs_raw = doc.get("jobs")
        if not isinstance(jobs_raw, YamlMap) or not jobs_raw:
            raise ctx.fail(doc.key_lines.get("jobs", doc.line), "jobs", "a workflow needs a non-empty 'jobs' mapping")
        order, needs = self._order(ctx, jobs_raw)
        units: dict[str, Unit] = {}
        ancestors: dict[str, list[str]] = {}
        for job_id in order:
            ancestors[job_id] = _unique([a for n in needs[job_id] for a in [*ancestors[n], n]])
            raw = jobs_raw[job_id]
            job = JobSite(scope, units, ancestors[job_id], needs[job_id], job_id, raw, jobs_raw.key_lines.get(job_id))
            unit = self._call(job) if "uses" in raw else self._plain(job, defaults)
            units[job_id.lower()] = unit
        return units

    def _plain(self, job: JobSite, defaults: RunDefaults) -> Unit:
        """A job with steps: its text rewritten for this scope, then parsed as any job."""
        scope, units, raw, line, job_id = job.scope, job.units, job.raw, job.line, job.job_id
        ctx, where = scope.ctx, job.where
        sub = Substitution(scope.inputs, scope.secrets, units, renames=scope.called)
        try:
            rewritten = sub.raw(raw)
        except RewriteError as exc:
            raise ctx.fail(line, where, str(exc)) from None
        flat_needs = job.flat(job.needs)
        explicit = scope.called or any(units[a.lower()].outputs is not None for a in job.ancestors)
        if explicit:
            flat_needs += scope.needs + job.flat(job.ancestors)
            own = None
            if "if" in raw:
                checked = if_condition(ctx, raw["if"], raw.key_lines.get("if"), f"{where}.if", JOB_IF_CONTEXTS, None)
                # A job's if sees the workflow's env: the called file's, not the run's file's.
                if_sub = Substitution(scope.inputs, scope.secrets, units, renames=scope.called, env=scope.env)
                own = if_sub.node(parse(checked), ctx, raw.key_lines.get("if"), f"{where}.if") if checked else None
            node = self._condition(scope, job.ancestor_results(), own)
            flat_needs += referenced_needs(node)
            rewritten["if"] = to_source(node)
            rewritten.key_lines.setdefault("if", raw.line)
        rewritten["needs"] = YamlList(_unique(flat_needs))
        rewritten["needs"].line = raw.key_lines.get("needs", raw.line)
        rewritten["needs"].item_lines = []
        rewritten.key_lines.setdefault("needs", raw.line)
        spec = parse_job(ctx, job_id, rewritten, line, defaults)
        flat = self._flat_id(scope, job_id, line)
        spec = spec.model_copy(
            update={"id": flat, "name": scope.name_prefix + spec.name, "workflow_env": scope.env, "line": line}
        )
        self._add(ctx, spec, line, where)
        return Unit(flat=[flat], result=need_path(flat, "result"), plain=flat)

    def _condition(self, scope: Scope, results: list[Node], own: Node | None, lead: bool = True) -> Node:
        """``always() && <the caller's condition> && <own, explicit>``: explicit, so the run's
        implicit ``success()`` (over every job before, the caller's included) never applies."""
        parts: list[Node] = [("call", "always", [])] if lead else []
        if scope.condition is not None:
            parts.append(scope.condition)
        parts.append(explicit_condition(own, results))
        return and_all(parts)

    def _flat_id(self, scope: Scope, job_id: str, line: int | None) -> str:
        flat = scope.id_prefix + job_id
        if len(flat) > MAX_FLAT_ID_CHARS:
            raise scope.ctx.fail(
                line,
                f"jobs.{job_id}",
                f"the job's id in the run ({flat[:40]}...) is longer than "
                f"{MAX_FLAT_ID_CHARS} characters: nest fewer or shorter-named calls",
            )
        return flat

    def _add(self, ctx: FileContext, spec: JobSpec, line: int | None, where: str) -> None:
        if len(self.jobs) >= MAX_JOBS_PER_WORKFLOW:
            raise ctx.fail(
                line,
                where,
                f"the run would have more than {MAX_JOBS_PER_WORKFLOW} jobs once its reusable workflows are expanded",
            )
        taken = {j.id.lower() for j in self.jobs}
        if spec.id.lower() in taken:
            raise ctx.fail(
                line,
                where,
                f"job id {spec.id!r} is taken by a job of a called workflow (ids are "
                "case-insensitive; '__' separates a caller from its called jobs)",
            )
        self.jobs.append(spec)

    # One call -----------------------------------------------------------------------------

    def _called(
        self, scope: Scope, key: str, line: int | None, call: CalledWorkflow
    ) -> tuple[Scope, YamlMap, CallDeclaration]:
        """The called file (read once per commit), its ``on.workflow_call``, and the scope it is
        expanded in (only its file, repository and commit set)."""
        ctx = scope.ctx
        self.calls += 1
        if self.calls > MAX_CALLS:
            raise ctx.fail(line, key, f"a run calls at most {MAX_CALLS} reusable workflows (nested calls included)")
        repository, ref = call.repository, call.ref
        if repository is None and scope.repository is not None:
            # A local call in another repository's file: that repository, at that commit.
            repository, ref = scope.repository, scope.sha
        sha: str | None = None
        content: bytes | None = None
        if repository is None:
            ident = shown = call.path
        else:
            assert ref is not None
            sha, content = self._other(
                ctx, key, line, call.written if call.repository else call.path, repository, ref, call.path
            )
            ident = f"{repository.lower()}/{call.path}@{sha}"
            shown = call.written if call.repository else f"{repository}/{call.path}@{sha[:12]}"
        if ident in scope.chain:
            raise ctx.fail(line, key, "a reusable workflow cannot call itself: " + " -> ".join([*scope.chain, ident]))
        if len(scope.chain) >= MAX_CALL_DEPTH:
            raise ctx.fail(
                line,
                key,
                f"reusable workflows nest at most {MAX_CALL_DEPTH} levels (the top-level file "
                "and nine called ones): " + " -> ".join([*scope.chain, ident]),
            )
        called_ctx = FileContext(shown)
        if ident not in self._docs:
            if content is None:
                content = self.read(call.path) if self.read is not None else None
                if content is None:
                    raise ctx.fail(
                        line,
                        key,
                        f"no workflow file {call.path} at this commit "
                        f"(or it is larger than {MAX_WORKFLOW_BYTES} bytes)",
                    )
            self._docs[ident] = load_document(called_ctx, content)
        doc = self._docs[ident]
        check_keys(called_ctx, doc, CALLED_WORKFLOW_KEYS, "")
        decl = call_declaration(called_ctx, doc.get("on"), doc.key_lines.get("on", doc.line))
        if decl is None:
            raise ctx.fail(line, key, f"{shown} is not a reusable workflow (its 'on' has no 'workflow_call')")
        return Scope(ctx=called_ctx, chain=(*scope.chain, ident), repository=repository, sha=sha), doc, decl

    def _other(
        self, ctx: FileContext, key: str, line: int | None, written: str, repository: str, ref: str, path: str
    ) -> tuple[str, bytes]:
        """Another repository's file, through the reader; refusals name the caller's key."""
        if self.other is None:
            raise ctx.fail(line, key, f"{written}: {OTHER_REPOSITORIES_UNSUPPORTED}")
        try:
            return self.other.other_repository(repository, ref, path)
        except CalledWorkflowUnavailable as exc:
            raise ctx.fail(line, key, f"called workflow {written}: {exc}") from None

    def _combinations(self, ctx: FileContext, raw: YamlMap, where: str, needs: list[str]) -> list[dict[str, Any]]:
        """The caller's ``strategy.matrix``, written out: one call per combination."""
        if "strategy" not in raw:
            return [{}]
        spec = strategy_spec(ctx, raw["strategy"], raw.key_lines.get("strategy"), f"{where}.strategy", needs)
        if spec is None:
            return [{}]
        if spec.matrix_expression or has_expression(spec.model_dump(include={"axes", "include", "exclude"})):
            raise ctx.fail(
                raw.key_lines.get("strategy"),
                f"{where}.strategy.matrix",
                "the matrix of a job that "
                "calls a reusable workflow must be written out (no ${{ }}): its calls are read with the file",
            )
        axes = {k: v for k, v in spec.axes.items() if isinstance(v, list)}
        assert not isinstance(spec.include, str) and not isinstance(spec.exclude, str)
        return expand_matrix(axes, spec.include, spec.exclude, MAX_JOBS_PER_WORKFLOW)

    def _call(self, job: JobSite) -> Unit:
        """A job that calls a reusable workflow: the called file's jobs, once per combination."""
        scope, units, raw, line, job_id, needs = job.scope, job.units, job.raw, job.line, job.job_id, job.needs
        ctx, where = scope.ctx, job.where
        _check_caller_keys(ctx, raw, where)
        call = called_workflow(ctx, raw["uses"], raw.key_lines.get("uses"), f"{where}.uses")
        target, doc, decl = self._called(scope, f"{where}.uses", raw.key_lines.get("uses"), call)
        path = target.ctx.path
        _check_inherit(scope, target, raw, where)
        if "permissions" in raw:
            permissions_spec(ctx, raw["permissions"], raw.key_lines.get("permissions"), f"{where}.permissions")
        own = None
        if "if" in raw:
            checked = if_condition(ctx, raw["if"], raw.key_lines.get("if"), f"{where}.if", JOB_IF_CONTEXTS, needs)
            own = parse(checked) if checked else None
        name = scalar_text(ctx, raw["name"], raw.key_lines.get("name"), f"{where}.name") if "name" in raw else job_id
        check_text(ctx, name, raw.key_lines.get("name"), f"{where}.name", JOB_START_CONTEXTS, needs)
        combos = self._combinations(ctx, raw, where, needs)
        flat: list[str] = []
        outputs: list[dict[str, Node]] = []
        results = job.ancestor_results()
        direct = job.flat(needs)
        for index, combo in enumerate(combos):
            strategy = {"job-index": index, "job-total": len(combos)} if combo else {}
            sub = Substitution(
                scope.inputs, scope.secrets, units, renames=scope.called, matrix=combo, strategy=strategy, env=scope.env
            )
            try:
                inputs = call_inputs(ctx, where, raw, decl, path, sub, needs)
                secrets = call_secrets(ctx, where, raw, decl, path, sub, scope.secrets, needs)
                shown = sub.text(name)
            except RewriteError as exc:
                raise ctx.fail(line, where, str(exc)) from None
            if combo and "${{" not in name:
                shown = combination_name(shown, combo, {})
            own_node = sub.node(own, ctx, raw.key_lines.get("if"), f"{where}.if") if own is not None else None
            condition = self._condition(scope, results, own_node, lead=False)
            refs = [
                *referenced_needs(condition),
                *[r for n in [*inputs.values(), *secrets_nodes(secrets)] for r in referenced_needs(n)],
            ]
            prefix = self._flat_id(scope, f"{job_id}-{index + 1}" if combo else job_id, line) + "__"
            called = Scope(
                ctx=target.ctx,
                id_prefix=prefix,
                name_prefix=f"{scope.name_prefix}{shown} / ",
                inputs=inputs,
                secrets=secrets,
                condition=condition,
                needs=_unique([*scope.needs, *direct, *job.flat(job.ancestors), *refs]),
                chain=target.chain,
                repository=target.repository,
                sha=target.sha,
            )
            before = len(self.jobs)
            called_units = self._expand_called(called, doc)
            flat += [j.id for j in self.jobs[before:]]
            outputs.append(self._outputs(called, called_units, decl))
        merged = {name: or_any([o[name] for o in reversed(outputs)]) for name in decl.outputs}
        return Unit(flat=flat, result=aggregate_result([need_path(f, "result") for f in flat]), outputs=merged)

    def _expand_called(self, scope: Scope, doc: YamlMap) -> dict[str, Unit]:
        """The called file's own ``env`` and ``defaults`` (rewritten for the call), then its jobs."""
        ctx = scope.ctx
        sub = Substitution(scope.inputs, scope.secrets, {}, renames=True)
        eline, dline = doc.key_lines.get("env"), doc.key_lines.get("defaults")
        # Checked as written (the contexts a workflow's env and defaults may use), then rewritten:
        # an input may stand for the caller's needs, which each job of the call needs directly.
        env = env_mapping(ctx, doc.get("env"), eline, "env", WORKFLOW_ENV_CONTEXTS, None)
        parse_run_defaults(ctx, doc.get("defaults"), dline, "defaults", WORKFLOW_DEFAULTS_CONTEXTS, None)
        try:
            scope.env = {k: sub.text(v) for k, v in env.items()}
            defaults_raw = sub.raw(doc["defaults"]) if "defaults" in doc else None
        except RewriteError as exc:
            raise ctx.fail(eline or dline, "env", str(exc)) from None
        defaults = parse_run_defaults(ctx, defaults_raw, dline, "defaults", JOB_DEFAULTS_CONTEXTS, None)
        if "permissions" in doc:
            permissions_spec(ctx, doc["permissions"], doc.key_lines.get("permissions"), "permissions")
        return self.expand_file(scope, doc, defaults)

    def _outputs(self, scope: Scope, units: dict[str, Unit], decl: CallDeclaration) -> dict[str, Node]:
        """``on.workflow_call.outputs`` as expressions over the jobs the call became."""
        sub = Substitution(scope.inputs, scope.secrets, units, renames=True, jobs_context=True)
        found: dict[str, Node] = {}
        for key, output in decl.outputs.items():
            where = f"on.workflow_call.outputs.{output.name}.value"
            try:
                found[key] = sub.node(template_node(output.value), scope.ctx, output.line, where)
            except RewriteError as exc:
                raise scope.ctx.fail(output.line, where, str(exc)) from None
        return found


def secrets_nodes(secrets: dict[str, Node] | None) -> list[Node]:
    return list(secrets.values()) if secrets else []


def _check_caller_keys(ctx: FileContext, raw: YamlMap, where: str) -> None:
    """A job that calls a reusable workflow has only the keys GitHub allows such a job."""
    for key in raw:
        if key not in CALLER_KEYS and key in JOB_KEYS:
            raise ctx.fail(
                raw.key_lines.get(key),
                f"{where}.{key}",
                f"not allowed in a job that calls a reusable workflow (it may have: {', '.join(sorted(CALLER_KEYS))})",
            )
    check_keys(ctx, raw, CALLER_KEYS, f"{where}.")


def _check_inherit(scope: Scope, target: Scope, raw: YamlMap, where: str) -> None:
    """``secrets: inherit`` only within one repository: GitHub's rule (one organization or
    enterprise) needs ownership leasehold cannot tell."""
    if (
        raw.get("secrets") == "inherit"
        and target.repository is not None
        and (scope.repository is None or target.repository.lower() != scope.repository.lower())
    ):
        raise scope.ctx.fail(
            raw.key_lines.get("secrets"),
            f"{where}.secrets",
            f"'inherit' is not supported for a workflow of another repository ({target.ctx.path}) on this "
            "deployment: GitHub allows it within one organization or enterprise, which leasehold "
            "cannot tell; pass the secrets it declares by name",
        )
