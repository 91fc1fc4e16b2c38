"""``leasehold vars set|list|delete``: a tenant's CI configuration variables (``${{ vars.X }}``).

Not secret: values are shown by ``list`` and in logs (use ``leasehold secrets`` for anything
that must stay hidden). ``set NAME VALUE``, or ``set NAME -`` to read the value from stdin.
``--repo R`` scopes a command to a repository, ``--repo R --environment E`` to one of its
deployment environments (what a job with ``environment: E`` sees over the repository's).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli.common import (
    UsageError,
    add_command,
    admin_parent,
    delete_scoped,
    field_errors,
    put_scoped,
    read_stdin_value,
    scoped_database,
)


def _open(args: argparse.Namespace) -> Any:
    if args.environment is not None and args.repo is None:
        raise UsageError("--environment needs --repo: an environment's variables are a repository's")
    return scoped_database(args)[1]


def cmd_vars_set(args: argparse.Namespace) -> int:
    from leasehold.records.ci.variables import VariableError, put_variable

    factory = _open(args)
    value = read_stdin_value() if args.value == "-" else args.value
    return put_scoped(
        args,
        "variable",
        VariableError,
        lambda: put_variable(factory, args.tenant, args.repo, args.name, value, args.environment),
    )


def cmd_vars_list(args: argparse.Namespace) -> int:
    from leasehold.records.ci.variables import VariableError, list_variables

    factory = _open(args)
    with field_errors(VariableError):
        infos = list_variables(factory, args.tenant, args.repo, args.environment)
    for info in infos:
        shown = {"name": info.name, "value": info.value, "repo_id": info.repo_id, "environment": info.environment}
        print(json.dumps({**shown, "updated_at": info.updated_at.isoformat()}))
    return 0


def cmd_vars_delete(args: argparse.Namespace) -> int:
    from leasehold.records.ci.variables import VariableError, delete_variable

    factory = _open(args)
    return delete_scoped(
        args,
        "variable",
        VariableError,
        lambda: delete_variable(factory, args.tenant, args.repo, args.name, args.environment),
    )


def add_commands(sub: Any) -> None:
    """Add the ``vars`` subcommands to the top-level parser's subparsers."""
    scoped = admin_parent(repo="a repository id: the variable is only that repository's")
    scoped.add_argument(
        "--environment", default=None, help="with --repo: the variable is only that deployment environment's"
    )
    variables = sub.add_parser("vars", help="CI configuration variables (${{ vars.NAME }}; not secret)")
    vars_sub = variables.add_subparsers(dest="vars_command", required=True)
    put_help = "create or replace a variable ('-': value from stdin)"
    add_command(vars_sub, "set", cmd_vars_set, put_help, scoped, "name", "value")
    add_command(vars_sub, "list", cmd_vars_list, "variables with their values (JSON lines)", scoped)
    add_command(vars_sub, "delete", cmd_vars_delete, "delete a variable", scoped, "name")
