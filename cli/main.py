"""``leasehold``: one console script for every process and admin task.

Errors the user can fix (a port in use, an unwritable data dir, a missing binary, a bad
setting) are printed as one line naming the problem, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from cli import ci, environments, fleet, plan, plans, readmodel, repos, runs, secrets, variables, video
from cli.common import UsageError, add_data_dir_arguments, admin_settings, command_settings, open_database
from leasehold.settings import Settings


def _logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _secure_data_dir(settings: Settings) -> None:
    from leasehold.data_dir import secure_data_dir

    try:
        secure_data_dir(settings.data_dir)
    except OSError as exc:
        raise UsageError(f"data dir {settings.data_dir} is not writable: {exc.strerror or exc}") from None


def cmd_up(args: argparse.Namespace) -> int:
    from cli.up import run_stack

    # The flag wins, else LEASEHOLD_API_PORT (the settings'), so the port the README documents
    # is the one the stack binds and the one it tells its children.
    settings = command_settings(args, api_port=args.api_port)
    return run_stack(
        settings,
        api_port=settings.api_port,
        temporal_port=args.temporal_port,
        ui_port=args.ui_port,
        headless=args.no_ui,
    )


def cmd_api(args: argparse.Namespace) -> int:
    from api.main import run

    settings = command_settings(args, api_host=args.host, api_port=args.port)
    _logging(settings)
    run(settings)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.kind == "gpu" and args.model:
        overrides["gpu_model"] = args.model
    if args.kind == "gpu" and args.memory_gib is not None:
        overrides["gpu_memory_gib"] = args.memory_gib
    if args.kind == "gpu" and args.capacity_type is not None:
        overrides["gpu_capacity_type"] = args.capacity_type
    if args.kind == "ci" and args.labels:
        overrides["ci_labels"] = args.labels
    settings = command_settings(args, **overrides)
    _logging(settings)
    _secure_data_dir(settings)
    _stop_cleanly_until_serving()
    try:
        _run_worker_kind(args.kind, settings)
    finally:
        # The event loop gave SIGTERM back to its default action on closing: a second stop
        # request while the process leaves must not turn a clean exit into death by signal.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0


def _stop_cleanly_until_serving() -> None:
    """Until the worker's event loop takes SIGTERM over (once connected, its worker built), a
    stop request ends the process with code 0: it holds no task yet, so there is nothing to
    hand back. Without this a stop during the GPU worker's model load, or a supervisor's stop
    right after it restarted a crashed worker, killed it by the signal's default action. It
    leaves at once rather than by ``SystemExit``: unwinding a half-made connection ended in
    interpreter finalization under the bridge's threads, which hung now and then."""

    def _stop(signum: int, _frame: object) -> None:
        leave(0)

    signal.signal(signal.SIGTERM, _stop)


def _run_worker_kind(kind: str, settings: Settings) -> None:
    if kind == "orchestration":
        from orchestrator.main import main as run_orchestration

        run_orchestration(settings)
    elif kind == "gpu":
        from worker_gpu.main import main as run_gpu

        run_gpu(settings)
    else:
        from leasehold.data_dir import set_ci_worker_umask
        from worker_ci.main import main as run_ci

        set_ci_worker_umask()
        run_ci(settings)


def cmd_keys_create(args: argparse.Namespace) -> int:
    from leasehold.records.api_keys import create_key

    settings = admin_settings(args)
    _secure_data_dir(settings)
    try:
        key = create_key(open_database(settings), args.tenant, args.user, args.tier)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(key)
    print(f"# tenant={args.tenant} user={args.user} tier={args.tier}; shown once, store it now", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="leasehold", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (default: $LEASEHOLD_DATA_DIR or ./.leasehold)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", parents=[common], help="run the whole stack on this machine (no Docker)")
    up.add_argument("--api-port", type=int, default=None, help="default: $LEASEHOLD_API_PORT or 8000")
    up.add_argument("--temporal-port", type=int, default=7233)
    up.add_argument("--ui-port", type=int, default=8233)
    up.add_argument("--no-ui", action="store_true", help="do not start the Temporal Web UI")
    up.set_defaults(func=cmd_up)

    api = sub.add_parser("api", parents=[common], help="serve the API")
    api.add_argument("--host", default=None)
    api.add_argument("--port", type=int, default=None)
    api.set_defaults(func=cmd_api)

    worker = sub.add_parser("worker", parents=[common], help="run one worker process")
    worker.add_argument("kind", choices=["orchestration", "gpu", "ci"])
    worker.add_argument("--model", default=None, help="gpu: the model version to load")
    worker.add_argument(
        "--memory-gib",
        type=float,
        default=None,
        help="gpu: GPU memory this worker offers jobs, in GiB (CPU workers declare it; CUDA measures it)",
    )
    worker.add_argument(
        "--capacity-type",
        choices=["reserved", "preemptible"],
        default=None,
        help="gpu: the capacity this worker is (deployments with LEASEHOLD_VIDEO_CAPACITY_TYPES=true)",
    )
    worker.add_argument("--labels", default=None, help="ci: comma-separated runs-on labels served")
    worker.set_defaults(func=cmd_worker)

    keys = sub.add_parser("keys", help="API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once)")
    add_data_dir_arguments(create)
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", required=True)
    # Checked by create_key, not argparse, so a bad tier is one line, not a usage dump.
    create.add_argument("--tier", required=True, metavar="{paid,free}")
    create.set_defaults(func=cmd_keys_create)

    # The CI admin commands, the people's commands (video, runs: through the API) and the
    # capacity planner, each module adding its own subcommands; listed here, in help order.
    for module in (ci, environments, plans, repos, secrets, variables, readmodel, video, runs, plan, fleet):
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from leasehold.data_dir import set_private_umask

    args = build_parser().parse_args(argv)
    # Before any command creates a file: keys, databases and logs are the user's alone.
    set_private_umask()
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"leasehold: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """The ``leasehold`` command: :func:`main`, then exit. A process that loaded Temporal's Rust
    bridge leaves without interpreter finalization (output and logs flushed first): the bridge's
    runtime threads can outlive the event loop, and finalizing under them crashes the process
    now and then (temporalio/sdk-python#300), after the command itself succeeded."""
    leave(main())


def leave(code: int) -> NoReturn:
    """Exit with ``code``; once Temporal's bridge is loaded, without interpreter finalization
    (see :func:`run`), output and logs flushed first."""
    if any(name.startswith("temporalio.bridge") for name in sys.modules):
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed pipe: nothing more can be said on it
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
