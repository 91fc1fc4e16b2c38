"""``leasehold secrets set|list|delete|rotate|init-keys``: a tenant's CI secrets from the command line.

``set`` reads the value from stdin (never from an argument, which would land in shell history
and in ``ps``); nothing prints a value.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cli.common import add_command, admin_parent, delete_scoped, put_scoped, read_stdin_value, scoped_database


def _open(args: argparse.Namespace, check: bool = True):  # type: ignore[no-untyped-def]
    from leasehold.records.ci.secrets import Keyring

    settings, factory = scoped_database(args, check)
    return factory, Keyring.from_settings(settings)


def cmd_secrets_set(args: argparse.Namespace) -> int:
    from leasehold.records.ci.secrets import SecretError, put_secret

    factory, keyring = _open(args)
    value = read_stdin_value()
    return put_scoped(
        args, "secret", SecretError, lambda: put_secret(factory, keyring, args.tenant, args.repo, args.name, value)
    )


def cmd_secrets_list(args: argparse.Namespace) -> int:
    from leasehold.records.ci.secrets import list_secrets

    factory, _ = _open(args)
    for info in list_secrets(factory, args.tenant, args.repo):
        print(json.dumps({"name": info.name, "repo_id": info.repo_id, "updated_at": info.updated_at.isoformat()}))
    return 0


def cmd_secrets_delete(args: argparse.Namespace) -> int:
    from leasehold.records.ci.secrets import SecretError, delete_secret

    factory, _ = _open(args)
    return delete_scoped(args, "secret", SecretError, lambda: delete_secret(factory, args.tenant, args.repo, args.name))


def cmd_secrets_rotate(args: argparse.Namespace) -> int:
    from leasehold.records.ci.repos import rotate_webhook_secrets, seal_webhook_secrets
    from leasehold.records.ci.secrets import rotate_secrets

    factory, keyring = _open(args, check=False)
    print(f"re-sealed {rotate_secrets(factory, keyring)} secret(s) under key {keyring.active}", file=sys.stderr)
    # Webhook secrets are sealed with the same keys, so a retired key must leave them too.
    hooks = seal_webhook_secrets(factory, keyring) + rotate_webhook_secrets(factory, keyring)
    print(f"re-sealed {hooks} webhook secret(s) under key {keyring.active}", file=sys.stderr)
    return 0


def cmd_secrets_init_keys(args: argparse.Namespace) -> int:
    """Create the deployment's keyring file once (compose's ``secrets-init``); an existing one
    is kept as it is."""
    from leasehold.records.ci.secrets import Keyring, KeyringError, init_keys_file

    path = Path(args.file)
    written = init_keys_file(path)
    try:
        Keyring.parse(path.read_text())
    except (OSError, KeyringError) as exc:
        print(f"leasehold: {path} is not a usable keyring: {exc}", file=sys.stderr)
        return 1
    print(f"{'created' if written else 'kept'} {path}", file=sys.stderr)
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``secrets`` subcommands to the top-level parser's subparsers."""
    scoped = admin_parent(repo="a repository id: the secret is only that repository's")
    secrets = sub.add_parser("secrets", help="CI secrets (write-only)")
    secrets_sub = secrets.add_subparsers(dest="secrets_command", required=True)
    add_command(
        secrets_sub, "set", cmd_secrets_set, "create or replace a secret; the value is read from stdin", scoped, "name"
    )
    add_command(secrets_sub, "list", cmd_secrets_list, "secret names and update times (JSON lines)", scoped)
    add_command(secrets_sub, "delete", cmd_secrets_delete, "delete a secret", scoped, "name")
    rotate_help = "re-seal every secret under the active key"
    add_command(secrets_sub, "rotate", cmd_secrets_rotate, rotate_help, admin_parent(tenant=False))
    init = secrets_sub.add_parser("init-keys", help="create the keyring file once (kept if it exists)")
    init.add_argument("file", help="where, e.g. a volume every service mounts")
    init.set_defaults(func=cmd_secrets_init_keys)
