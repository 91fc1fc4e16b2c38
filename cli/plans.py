"""``leasehold plans set|show|network|isolation|retention``: a CI tenant's fairness weight,
concurrency cap, network grant, sandbox backend and how long its finished runs and logs are kept."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli.common import UsageError, add_data_dir_arguments, admin_settings, open_database


def cmd_plans_set(args: argparse.Namespace) -> int:
    from leasehold.records.api_keys import validate_name
    from leasehold.records.ci.plans import set_plan

    settings = admin_settings(args)
    try:
        validate_name("tenant", args.tenant)
        plan = set_plan(open_database(settings), args.tenant, args.weight, args.max_jobs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(plan.__dict__))
    return 0


def cmd_plans_show(args: argparse.Namespace) -> int:
    from leasehold.records.ci.plans import get_plan, isolation_backend, log_retention_days, network_allowed

    settings = admin_settings(args)
    db = open_database(settings)
    shown = dict(get_plan(db, settings, args.tenant).__dict__, network=network_allowed(db, args.tenant))
    shown["isolation"] = isolation_backend(db, args.tenant)
    shown["log_retention_days"] = log_retention_days(db, args.tenant) or settings.ci_log_retention_days
    print(json.dumps(shown))
    return 0


def cmd_plans_network(args: argparse.Namespace) -> int:
    from leasehold.records.api_keys import validate_name
    from leasehold.records.ci.plans import set_network

    settings = admin_settings(args)
    try:
        validate_name("tenant", args.tenant)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    allowed = args.state == "on"
    set_network(open_database(settings), args.tenant, allowed)
    print(json.dumps({"tenant_id": args.tenant, "network": allowed}))
    return 0


def cmd_plans_isolation(args: argparse.Namespace) -> int:
    from leasehold.records.api_keys import validate_name
    from leasehold.records.ci.plans import set_isolation

    settings = admin_settings(args)
    try:
        validate_name("tenant", args.tenant)
        set_isolation(open_database(settings), args.tenant, args.backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps({"tenant_id": args.tenant, "isolation": args.backend}))
    return 0


def cmd_plans_retention(args: argparse.Namespace) -> int:
    from leasehold.records.api_keys import validate_name
    from leasehold.records.ci.plans import set_log_retention

    settings = admin_settings(args)
    if (args.days is None) == (not args.default):
        raise UsageError("give either --days N or --default")
    try:
        validate_name("tenant", args.tenant)
        set_log_retention(open_database(settings), args.tenant, args.days)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    days = args.days if args.days is not None else settings.ci_log_retention_days
    print(json.dumps({"tenant_id": args.tenant, "log_retention_days": days, "default": args.days is None}))
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``plans`` subcommands to the top-level parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_data_dir_arguments(common)
    common.add_argument("--tenant", required=True)
    plans = sub.add_parser("plans", help="CI tenant plans (fair-share weight, concurrency cap)")
    plans_sub = plans.add_subparsers(dest="plans_command", required=True)
    put = plans_sub.add_parser("set", parents=[common], help="set a tenant's plan; applies to later pushes")
    put.add_argument("--weight", type=float, required=True, help="fair-share weight (default plan: 1)")
    put.add_argument("--max-jobs", type=int, required=True, help="most of the tenant's jobs running at once")
    put.set_defaults(func=cmd_plans_set)
    show = plans_sub.add_parser("show", parents=[common], help="a tenant's plan (or the defaults)")
    show.set_defaults(func=cmd_plans_show)
    net = plans_sub.add_parser(
        "network",
        parents=[common],
        help="let a tenant's jobs ask for network (filtered egress; never for fork pull requests)",
    )
    net.add_argument("state", choices=["on", "off"])
    net.set_defaults(func=cmd_plans_network)
    iso = plans_sub.add_parser(
        "isolation",
        parents=[common],
        help="the sandbox a tenant's jobs run in (gvisor: a user-space kernel, not the host's)",
    )
    # leasehold.records.ci.plans.ISOLATION_BACKENDS, spelled out: the parser is built for every
    # command, and the records module loads SQLAlchemy (a test keeps the two lists equal).
    iso.add_argument("backend", choices=["bubblewrap", "gvisor"])
    iso.set_defaults(func=cmd_plans_isolation)
    keep = plans_sub.add_parser(
        "retention",
        parents=[common],
        help="days a tenant's finished CI runs and logs are kept (1-3650; --default: the deployment's)",
    )
    keep.add_argument("--days", type=int, default=None, help="days after a run finished (1 to 3650)")
    keep.add_argument("--default", action="store_true", help="use the deployment's default again")
    keep.set_defaults(func=cmd_plans_retention)
