"""``leasehold fleet``: the fleet controller (``run``) and its latest decisions (``decisions``)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from cli.common import UsageError, command_settings


def cmd_run(args: argparse.Namespace) -> int:
    import logging

    from activities.fleet.provider import FleetProvider
    from orchestrator.fleet.runner import FleetConfigError, load_spec, run_fleet

    settings = command_settings(args)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = args.config or settings.fleet_config
    if config is None:
        raise UsageError("the fleet spec is needed: --config FILE or LEASEHOLD_FLEET_CONFIG")
    try:
        spec = load_spec(config)
    except FleetConfigError as exc:
        raise UsageError(str(exc)) from None
    provider: FleetProvider
    if args.provider == "kubernetes":
        from orchestrator.fleet.kubernetes import KubernetesProvider, KubernetesUnavailable

        try:
            provider = KubernetesProvider.from_environment(args.namespace)
        except KubernetesUnavailable as exc:
            raise UsageError(str(exc)) from None
    else:
        from orchestrator.fleet.local import LocalProcessProvider

        provider = LocalProcessProvider(settings.data_dir / "logs" / "fleet")
    run_fleet(settings, spec, provider)
    return 0


def cmd_decisions(args: argparse.Namespace) -> int:
    from leasehold.temporal import connect
    from workflows.fleet.controller import FleetWorkflow, fleet_workflow_id

    settings = command_settings(args)

    async def read() -> Any:
        client = await connect(settings)
        handle = client.get_workflow_handle(fleet_workflow_id(settings.queue_prefix))
        return await handle.query(FleetWorkflow.state)

    try:
        state = asyncio.run(read())
    except Exception as exc:  # no controller, or the engine is down: one line either way
        raise UsageError(f"no fleet controller answered: {exc}") from None
    latest = [state.last] if state.last is not None and state.last not in state.decisions else []
    for decision in [*state.decisions[-args.last :], *latest]:
        if args.json:
            print(json.dumps(decision.model_dump(mode="json")))
            continue
        line = ", ".join(f"{p.key} {p.current}->{p.desired} ({p.reason})" for p in decision.pools)
        done = "; ".join(
            [f"started {n} on {k}" for k, n in decision.started.items()]
            + [f"retired {', '.join(v)}" for v in decision.retired.values() if v]
        )
        print(f"{decision.at:%H:%M:%S} {decision.cost_per_hour:g}/h  {line}{'  ' + done if done else ''}")
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``fleet`` subcommands to the top-level parser's subparsers."""
    fleet = sub.add_parser("fleet", help="the GPU fleet controller")
    fleet_sub = fleet.add_subparsers(dest="fleet_command", required=True)
    run = fleet_sub.add_parser("run", help="run the controller with a provider (until SIGTERM)")
    run.add_argument("--data-dir", type=Path, default=None)
    run.add_argument(
        "--config", type=Path, default=None, help="the fleet spec, TOML or JSON (default: $LEASEHOLD_FLEET_CONFIG)"
    )
    run.add_argument("--provider", choices=["local", "kubernetes"], default="local")
    run.add_argument("--namespace", default="default", help="kubernetes: the namespace of the Deployments")
    run.set_defaults(func=cmd_run)
    decisions = fleet_sub.add_parser("decisions", help="the controller's latest decisions, with their inputs")
    decisions.add_argument("--data-dir", type=Path, default=None)
    decisions.add_argument("--last", type=int, default=10)
    decisions.add_argument("--json", action="store_true", help="one JSON object per decision")
    decisions.set_defaults(func=cmd_decisions)
