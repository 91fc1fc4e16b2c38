"""``leasehold vars set|list|delete``: a tenant's CI configuration variables (``${{ vars.X }}``).

Not secret: values are shown by ``list`` and in logs (use ``leasehold secrets`` for anything
that must stay hidden). ``set NAME VALUE``, or ``set NAME -`` to read the value from stdin.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.common import UsageError, add_data_dir_arguments, admin_settings, check_scope, open_database, read_stdin_value


def _open(args: argparse.Namespace) -> Any:
    return open_database(admin_settings(args))


def cmd_vars_set(args: argparse.Namespace) -> int:
    from leasehold.records.ci.variables import VariableError, put_variable

    factory = _open(args)
    check_scope(factory, args)
    value = read_stdin_value() if args.value == "-" else args.value
    try:
        info, created = put_variable(factory, args.tenant, args.repo, args.name, value)
    except VariableError as exc:
        raise UsageError(f"{exc.field}: {exc.message}") from None
    scope = f"repository {args.repo}" if args.repo else f"tenant {args.tenant}"
    print(f"{'created' if created else 'updated'} variable {info.name} for {scope}", file=sys.stderr)
    return 0


def cmd_vars_list(args: argparse.Namespace) -> int:
    from leasehold.records.ci.variables import list_variables

    factory = _open(args)
    check_scope(factory, args)
    for info in list_variables(factory, args.tenant, args.repo):
        shown = {"name": info.name, "value": info.value, "repo_id": info.repo_id}
        print(json.dumps({**shown, "updated_at": info.updated_at.isoformat()}))
    return 0


def cmd_vars_delete(args: argparse.Namespace) -> int:
    from leasehold.records.ci.variables import VariableError, delete_variable

    factory = _open(args)
    check_scope(factory, args)
    try:
        removed = delete_variable(factory, args.tenant, args.repo, args.name)
    except VariableError as exc:
        raise UsageError(f"{exc.field}: {exc.message}") from None
    if not removed:
        raise UsageError(f"no variable {args.name!r}")
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``vars`` subcommands to the top-level parser's subparsers."""
    scoped = argparse.ArgumentParser(add_help=False)
    add_data_dir_arguments(scoped)
    scoped.add_argument("--tenant", required=True)
    scoped.add_argument("--repo", default=None, help="a repository id: the variable is only that repository's")
    variables = sub.add_parser("vars", help="CI configuration variables (${{ vars.NAME }}; not secret)")
    vars_sub = variables.add_subparsers(dest="vars_command", required=True)
    put = vars_sub.add_parser("set", parents=[scoped], help="create or replace a variable ('-': value from stdin)")
    put.add_argument("name")
    put.add_argument("value")
    put.set_defaults(func=cmd_vars_set)
    ls = vars_sub.add_parser("list", parents=[scoped], help="variables with their values (JSON lines)")
    ls.set_defaults(func=cmd_vars_list)
    rm = vars_sub.add_parser("delete", parents=[scoped], help="delete a variable")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_vars_delete)
