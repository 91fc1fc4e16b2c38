"""``leasehold plans set|show|network|isolation|retention``: a CI tenant's fairness weight,
concurrency cap, network grant, sandbox backend and how long its finished runs and logs are kept."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cli.common import UsageError, add_command, admin_parent, admin_settings, open_database

if TYPE_CHECKING:
    from sqlalchemy.orm import sessionmaker

    from leasehold.settings import Settings


def _write(args: argparse.Namespace, settings: Settings, write: Callable[[sessionmaker], Any]) -> Any:
    """``write`` to the database for ``--tenant``; a bad tenant name or value is a `UsageError`."""
    from leasehold.records.api_keys import validate_name

    try:
        validate_name("tenant", args.tenant)
        return write(open_database(settings))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_plans_set(args: argparse.Namespace) -> int:
    from leasehold.records.ci.plans import set_plan

    plan = _write(args, admin_settings(args), lambda db: set_plan(db, args.tenant, args.weight, args.max_jobs))
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
    from leasehold.records.ci.plans import set_network

    allowed = args.state == "on"
    _write(args, admin_settings(args), lambda db: set_network(db, args.tenant, allowed))
    print(json.dumps({"tenant_id": args.tenant, "network": allowed}))
    return 0


def cmd_plans_isolation(args: argparse.Namespace) -> int:
    from leasehold.records.ci.plans import set_isolation

    _write(args, admin_settings(args), lambda db: set_isolation(db, args.tenant, args.backend))
    print(json.dumps({"tenant_id": args.tenant, "isolation": args.backend}))
    return 0


def cmd_plans_retention(args: argparse.Namespace) -> int:
    from leasehold.records.ci.plans import set_log_retention

    settings = admin_settings(args)
    if (args.days is None) == (not args.default):
        raise UsageError("give either --days N or --default")
    _write(args, settings, lambda db: set_log_retention(db, args.tenant, args.days))
    days = args.days if args.days is not None else settings.ci_log_retention_days
    print(json.dumps({"tenant_id": args.tenant, "log_retention_days": days, "default": args.days is None}))
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``plans`` subcommands to the top-level parser's subparsers."""
    common = admin_parent()
    plans = sub.add_parser("plans", help="CI tenant plans (fair-share weight, concurrency cap)")
    plans_sub = plans.add_subparsers(dest="plans_command", required=True)
    put = add_command(plans_sub, "set", cmd_plans_set, "set a tenant's plan; applies to later pushes", common)
    put.add_argument("--weight", type=float, required=True, help="fair-share weight (default plan: 1)")
    put.add_argument("--max-jobs", type=int, required=True, help="most of the tenant's jobs running at once")
    add_command(plans_sub, "show", cmd_plans_show, "a tenant's plan (or the defaults)", common)
    network_help = "let a tenant's jobs ask for network (filtered egress; never for fork pull requests)"
    net = add_command(plans_sub, "network", cmd_plans_network, network_help, common)
    net.add_argument("state", choices=["on", "off"])
    isolation_help = "the sandbox a tenant's jobs run in (gvisor: a user-space kernel, not the host's)"
    iso = add_command(plans_sub, "isolation", cmd_plans_isolation, isolation_help, common)
    # leasehold.records.ci.plans.ISOLATION_BACKENDS, spelled out: the parser is built for every
    # command, and the records module loads SQLAlchemy (a test keeps the two lists equal).
    iso.add_argument("backend", choices=["bubblewrap", "gvisor"])
    retention_help = "days a tenant's finished CI runs and logs are kept (1-3650; --default: the deployment's)"
    keep = add_command(plans_sub, "retention", cmd_plans_retention, retention_help, common)
    keep.add_argument("--days", type=int, default=None, help="days after a run finished (1 to 3650)")
    keep.add_argument("--default", action="store_true", help="use the deployment's default again")
