"""``leasehold secrets set|list|delete|rotate``: a tenant's CI secrets from the command line.

``set`` reads the value from stdin (never from an argument, which would land in shell history
and in ``ps``); nothing prints a value.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.common import UsageError, add_data_dir_arguments, admin_settings, check_scope, open_database, read_stdin_value


def _open(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from leasehold.records.ci.secrets import Keyring

    settings = admin_settings(args)
    return open_database(settings), Keyring.from_settings(settings)


def cmd_secrets_set(args: argparse.Namespace) -> int:
    from leasehold.records.ci.secrets import SecretError, put_secret

    factory, keyring = _open(args)
    check_scope(factory, args)
    value = read_stdin_value()
    try:
        info, created = put_secret(factory, keyring, args.tenant, args.repo, args.name, value)
    except SecretError as exc:
        raise UsageError(f"{exc.field}: {exc.message}") from None
    scope = f"repository {args.repo}" if args.repo else f"tenant {args.tenant}"
    print(f"{'created' if created else 'updated'} secret {info.name} for {scope}", file=sys.stderr)
    return 0


def cmd_secrets_list(args: argparse.Namespace) -> int:
    from leasehold.records.ci.secrets import list_secrets

    factory, _ = _open(args)
    check_scope(factory, args)
    for info in list_secrets(factory, args.tenant, args.repo):
        print(json.dumps({"name": info.name, "repo_id": info.repo_id, "updated_at": info.updated_at.isoformat()}))
    return 0


def cmd_secrets_delete(args: argparse.Namespace) -> int:
    from leasehold.records.ci.secrets import SecretError, delete_secret

    factory, _ = _open(args)
    check_scope(factory, args)
    try:
        removed = delete_secret(factory, args.tenant, args.repo, args.name)
    except SecretError as exc:
        raise UsageError(f"{exc.field}: {exc.message}") from None
    if not removed:
        raise UsageError(f"no secret {args.name!r}")
    return 0


def cmd_secrets_rotate(args: argparse.Namespace) -> int:
    from leasehold.records.ci.repos import rotate_webhook_secrets, seal_webhook_secrets
    from leasehold.records.ci.secrets import rotate_secrets

    factory, keyring = _open(args)
    print(f"re-sealed {rotate_secrets(factory, keyring)} secret(s) under key {keyring.active}", file=sys.stderr)
    # Webhook secrets are sealed with the same keys, so a retired key must leave them too.
    hooks = seal_webhook_secrets(factory, keyring) + rotate_webhook_secrets(factory, keyring)
    print(f"re-sealed {hooks} webhook secret(s) under key {keyring.active}", file=sys.stderr)
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``secrets`` subcommands to the top-level parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_data_dir_arguments(common)
    scoped = argparse.ArgumentParser(add_help=False, parents=[common])
    scoped.add_argument("--tenant", required=True)
    scoped.add_argument("--repo", default=None, help="a repository id: the secret is only that repository's")
    secrets = sub.add_parser("secrets", help="CI secrets (write-only)")
    secrets_sub = secrets.add_subparsers(dest="secrets_command", required=True)

    put = secrets_sub.add_parser(
        "set", parents=[scoped], help="create or replace a secret; the value is read from stdin"
    )
    put.add_argument("name")
    put.set_defaults(func=cmd_secrets_set)

    ls = secrets_sub.add_parser("list", parents=[scoped], help="secret names and update times (JSON lines)")
    ls.set_defaults(func=cmd_secrets_list)

    rm = secrets_sub.add_parser("delete", parents=[scoped], help="delete a secret")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_secrets_delete)

    rotate = secrets_sub.add_parser("rotate", parents=[common], help="re-seal every secret under the active key")
    rotate.set_defaults(func=cmd_secrets_rotate)
