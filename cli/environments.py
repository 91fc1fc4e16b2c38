"""``leasehold environments set|list``: which environments of a repository require approval."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli.common import UsageError, add_command, admin_parent, admin_settings, open_database


def _db(args: argparse.Namespace) -> Any:
    from leasehold.records.ci.repos import get_repo

    db = open_database(admin_settings(args))
    if get_repo(db, args.tenant, args.repo) is None:
        raise UsageError(f"tenant {args.tenant!r} has no repository {args.repo!r}")
    return db


def cmd_environments_set(args: argparse.Namespace) -> int:
    from leasehold.records.ci.environments import EnvironmentError, set_environment

    db = _db(args)
    try:
        record = set_environment(db, args.tenant, args.repo, args.name, args.required_approval, args.approver or [])
    except EnvironmentError as exc:
        raise UsageError(exc.message) from None
    _print(record)
    return 0


def _print(record: Any) -> None:
    print(json.dumps({**record.__dict__, "updated_at": record.updated_at.isoformat()}))


def cmd_environments_list(args: argparse.Namespace) -> int:
    from leasehold.records.ci.environments import list_environments

    for record in list_environments(_db(args), args.tenant, args.repo):
        _print(record)
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``environments`` subcommands to the top-level parser's subparsers."""
    common = admin_parent(repo="repository id (repo_...)", repo_required=True)
    envs = sub.add_parser("environments", help="CI deployment environments that require approval")
    envs_sub = envs.add_subparsers(dest="environments_command", required=True)
    put = add_command(envs_sub, "set", cmd_environments_set, "protect (or unprotect) an environment", common, "name")
    put.add_argument("--required-approval", action=argparse.BooleanOptionalAction, default=True)
    put.add_argument("--approver", action="append", help="a user id who may approve (repeat; none: any user)")
    add_command(envs_sub, "list", cmd_environments_list, "a repository's environments", common)
