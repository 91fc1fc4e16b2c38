"""The parsed workflow file: the supported subset of GitHub Actions syntax, and why a file was rejected.

Also the actions its steps use (``ActionSpec``), resolved when the push is listed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SpecError(BaseModel):
    """Why a workflow file was rejected: the file, the 1-based line and the key at fault."""

    file: str
    line: int | None = None
    key: str | None = None
    message: str

    def render(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        return f"{where}: {self.key + ': ' if self.key else ''}{self.message}"


class PushFilter(BaseModel):
    """``on.push`` filters (glob patterns); ``None`` means the key was absent."""

    enabled: bool = False
    branches: list[str] | None = None
    branches_ignore: list[str] | None = None
    tags: list[str] | None = None
    tags_ignore: list[str] | None = None
    # ``on.pull_request.types`` (only for pull-request filters); None means the default three.
    types: list[str] | None = None
    # ``paths`` / ``paths-ignore`` globs over the changed files (``actions_language.triggers.paths_match``).
    paths: list[str] | None = None
    paths_ignore: list[str] | None = None
    # Line of the ``paths``/``paths-ignore`` key, for a refusal that names it.
    paths_line: int | None = None


class WorkflowRunFilter(BaseModel):
    """``on.workflow_run``: runs of the named workflows (glob patterns, as GitHub matches
    names) reaching one of ``types`` on a branch the filters allow."""

    enabled: bool = False
    workflows: list[str] = Field(default_factory=list)
    types: list[str] | None = None
    branches: list[str] | None = None
    branches_ignore: list[str] | None = None


class StrategySpec(BaseModel):
    """``jobs.<id>.strategy``, validated. Matrix values are JSON values as written; an axis, the
    ``include``/``exclude`` lists or the whole matrix may instead be one ``${{ }}`` expression
    (``fromJSON(...)``), kept as text for the run to evaluate."""

    # Axis name -> its values, or the expression that yields them (file order).
    axes: dict[str, list[Any] | str] = Field(default_factory=dict)
    include: list[dict[str, Any]] | str = Field(default_factory=list)
    exclude: list[dict[str, Any]] | str = Field(default_factory=list)
    # ``matrix: ${{ fromJSON(...) }}``: the whole matrix from one expression (then no axes).
    matrix_expression: str | None = None
    fail_fast: bool | str = True
    # None: as many at once as the deployment allows.
    max_parallel: int | str | None = None
    line: int | None = None


class ConcurrencySpec(BaseModel):
    """``concurrency:`` of a workflow or a job (``group`` may hold expressions)."""

    group: str
    cancel_in_progress: bool | str = False
    line: int | None = None


class DispatchInput(BaseModel):
    """One ``on.workflow_dispatch.inputs.<name>``."""

    type: str = "string"
    description: str = ""
    required: bool = False
    # As typed: text for string/choice/environment, bool for boolean, a number for number.
    default: str | bool | float | None = None
    # The choices of a ``choice`` input.
    options: list[str] = Field(default_factory=list)


class DispatchSpec(BaseModel):
    """``on.workflow_dispatch``: the file can be run by hand, with these inputs."""

    inputs: dict[str, DispatchInput] = Field(default_factory=dict)


class StepSpec(BaseModel):
    """One ``run:`` step, or one of the built-in ``uses:`` actions (then ``run`` is empty).
    Expressions stay unevaluated here (``${{ ... }}`` text)."""

    index: int
    id: str | None = None
    name: str
    run: str = ""
    env: dict[str, str] = Field(default_factory=dict)
    working_directory: str | None = None
    # ``bash``, ``sh``, ``python`` or a ``command ... {0}`` template (defaults.run applied).
    shell: str = "bash"
    if_expr: str | None = None
    continue_on_error: bool = False
    timeout_minutes: float | None = None
    # ``timeout-minutes``/``continue-on-error`` written as one ``${{ }}``: evaluated by the job
    # when the step starts (then the plain fields above hold their defaults).
    timeout_minutes_expr: str | None = None
    continue_on_error_expr: str | None = None
    line: int | None = None
    # ``uses:`` (a built-in action, ``./path``, or ``owner/repo[/path]@ref``), with its ``with:``
    # inputs (unevaluated text).
    uses: str | None = None
    with_inputs: dict[str, str] = Field(default_factory=dict)
    # For any action but the built-in ones: the commit ``ref`` named when the push was listed
    # (so every attempt of the run runs the same code), and the action's definition as read
    # then. ``None`` on a ``run:`` step, a built-in action, or a payload older than actions.
    uses_sha: str | None = None
    resolved: ActionSpec | None = None

    @property
    def action(self) -> str | None:
        """``actions/cache`` for ``actions/cache@v4`` (lower-case), ``None`` for a ``run:`` step."""
        return self.uses.split("@", 1)[0].lower() if self.uses else None

    @property
    def builtin(self) -> bool:
        """Whether this is one of the actions the worker implements itself (``BUILTIN_ACTIONS``)."""
        return self.uses is not None and self.action in BUILTIN_ACTIONS


# The ``uses:`` actions leasehold implements natively (any version): checkout is a no-op (the
# workspace already holds the commit); cache restores and saves per-tenant caches.
ACTION_CHECKOUT = "actions/checkout"

ACTION_CACHE = "actions/cache"

BUILTIN_ACTIONS = (ACTION_CHECKOUT, ACTION_CACHE)


class ActionInput(BaseModel):
    """One ``inputs.<name>`` of an action's ``action.yml``."""

    default: str | None = None
    required: bool = False


class ActionSpec(BaseModel):
    """An action's ``action.yml`` as read when the push was listed: a composite action (its own
    steps) or a JavaScript action (``main``, ``pre``, ``post`` run with the worker's ``node``).

    ``repository`` is ``owner/repo`` of a remote action (its files are the tree of ``sha``) or
    ``None`` for a local ``./path`` one (its files are in the job's workspace at ``path``).
    """

    name: str = ""
    using: str
    repository: str | None = None
    sha: str | None = None
    # The action's directory inside its repository ("" for the root).
    path: str = ""
    inputs: dict[str, ActionInput] = Field(default_factory=dict)
    # Output name -> expression (composite: ``outputs.<name>.value``); JavaScript actions
    # declare names only (the value is what ``main`` wrote to ``$GITHUB_OUTPUT``).
    outputs: dict[str, str] = Field(default_factory=dict)
    steps: list[StepSpec] = Field(default_factory=list)
    main: str | None = None
    pre: str | None = None
    pre_if: str | None = None
    post: str | None = None
    post_if: str | None = None

    @property
    def is_composite(self) -> bool:
        return self.using == ACTION_COMPOSITE


ACTION_COMPOSITE = "composite"
# ``runs.using`` values of JavaScript actions this worker runs with its own ``node``.
NODE_RUNTIMES = ("node20", "node24")


class ContainerSpec(BaseModel):
    """``jobs.<id>.container`` or one ``jobs.<id>.services.<key>``: an image of the deployment's
    registry mirror and the options leasehold accepts (``actions_language.containers``)."""

    image: str
    # ``sha256:...`` of the image's manifest, pinned when the push is listed (every attempt
    # runs the same image); ``None`` until then, or where the listing could not resolve it.
    digest: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # ``ports:`` as written ("5432", "8080:80"): container ports the job reaches by the key.
    ports: list[str] = Field(default_factory=list)
    # ``--health-cmd`` and kin from ``options:`` (seconds; ``None``: not given).
    health_cmd: str | None = None
    health_interval_seconds: float | None = None
    health_timeout_seconds: float | None = None
    health_retries: int | None = None
    health_start_period_seconds: float | None = None
    line: int | None = None


class EnvironmentExpression(BaseModel):
    """An ``environment:`` name written with ``${{ }}``, and where: the push's listing evaluates
    it (``actions_language.environment_names``), and names this place if it cannot."""

    text: str
    file: str
    line: int | None = None
    key: str


class JobSpec(BaseModel):
    """One ``jobs.<id>`` entry."""

    id: str
    name: str
    needs: list[str] = Field(default_factory=list)
    runs_on: list[str] = Field(default_factory=lambda: ["linux"])
    env: dict[str, str] = Field(default_factory=dict)
    if_expr: str | None = None
    timeout_minutes: float = 360.0
    continue_on_error: bool = False
    # Declared job outputs (name -> expression); empty means "every value the steps wrote to
    # $GITHUB_OUTPUT" (a leasehold convenience; GitHub requires declaring them).
    outputs: dict[str, str] = Field(default_factory=dict)
    steps: list[StepSpec] = Field(default_factory=list)
    # Leasehold extension (job key ``network: true``): the sandbox keeps a network namespace
    # with the host's network. Off by default.
    network: bool = False
    line: int | None = None
    # Names of the secrets the job references (upper-case): the only ones its worker fetches.
    secrets: list[str] = Field(default_factory=list)
    # ``environment:`` (its name): when the repository protects it, the job waits for approval.
    environment: str | None = None
    # ``environment:`` written with ``${{ }}``, until the listing evaluates it into
    # ``environment`` (a run's spec never holds one).
    environment_expression: EnvironmentExpression | None = None
    strategy: StrategySpec | None = None
    concurrency: ConcurrencySpec | None = None
    # ``permissions:`` as written ("read-all", "write-all" or scope -> read/write/none).
    # Informational: leasehold issues jobs no token.
    permissions: str | dict[str, str] | None = None
    # ``timeout-minutes`` / ``continue-on-error`` written as one ``${{ }}`` (``${{ matrix.x }}``),
    # evaluated by the run when the job starts (then the plain fields hold the result). A
    # ``runs-on`` label may hold expressions too, evaluated then as well.
    timeout_minutes_expr: str | None = None
    continue_on_error_expr: str | None = None
    # ``container:`` and ``services:`` (OCI backend only; other backends refuse such a job).
    container: ContainerSpec | None = None
    services: dict[str, ContainerSpec] = Field(default_factory=dict)
    # A job of a called (reusable) workflow: that file's ``env``, which replaces the run's file's
    # for it (a caller's env does not reach a called workflow). ``None``: the run's file's.
    workflow_env: dict[str, str] | None = None


class WorkflowSpec(BaseModel):
    """A parsed, validated workflow file."""

    path: str
    name: str
    # ``run-name``: the title of each run, with ``${{ }}`` over github, inputs and vars
    # (evaluated when the run starts; ``CIRunState.display_title``).
    run_name: str | None = None
    on_push: PushFilter = Field(default_factory=PushFilter)
    # ``on.pull_request``: branches/branches-ignore match the base branch.
    on_pull_request: PushFilter = Field(default_factory=PushFilter)
    # ``on.pull_request_target``: the same filters; the run builds the base branch's commit.
    on_pull_request_target: PushFilter = Field(default_factory=PushFilter)
    # ``on.release`` / ``on.merge_group``: only ``types``.
    on_release: PushFilter = Field(default_factory=PushFilter)
    on_merge_group: PushFilter = Field(default_factory=PushFilter)
    on_workflow_run: WorkflowRunFilter = Field(default_factory=WorkflowRunFilter)
    env: dict[str, str] = Field(default_factory=dict)
    on_dispatch: DispatchSpec | None = None
    # ``on.schedule``: cron expressions as written (UTC; each runs on the default branch's head).
    on_schedule: list[str] = Field(default_factory=list)
    concurrency: ConcurrencySpec | None = None
    permissions: str | dict[str, str] | None = None
    # In file order; needs form a DAG (validated).
    jobs: list[JobSpec] = Field(default_factory=list)


class WorkflowFile(BaseModel):
    """A workflow file found at a commit: parsed, or rejected with the reason."""

    path: str
    spec: WorkflowSpec | None = None
    error: SpecError | None = None
    # Whether the push (ref) matches ``on.push``; invalid files count as triggered so their
    # failure is visible as a run.
    triggered: bool = True


# Most jobs a workflow file may declare (bounds the run workflow's history, with
# CI_MAX_RETRIES_PER_RUN).
MAX_JOBS_PER_WORKFLOW = 64

MAX_STEPS_PER_JOB = 100

# StepSpec and ActionSpec refer to each other (a composite action's steps).
StepSpec.model_rebuild()
