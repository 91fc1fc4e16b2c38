"""``leasehold repos add|list``: register a tenant's repositories from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli.common import UsageError, add_data_dir_arguments, admin_settings, open_database


def cmd_repos_add(args: argparse.Namespace) -> int:
    from leasehold.clone_urls import ClonePolicy
    from leasehold.records.api_keys import validate_name
    from leasehold.records.ci.repos import RepoError, add_repo
    from leasehold.records.ci.secrets import Keyring, KeyringError

    settings = admin_settings(args)
    try:
        validate_name("tenant", args.tenant)
        record = add_repo(
            open_database(settings),
            args.tenant,
            args.name,
            args.clone_url,
            args.webhook_secret,
            args.default_branch,
            args.github_id,
            # The same rules the API applies (LEASEHOLD_CI_LOCAL_REPO_ROOT and the allow-lists).
            policy=ClonePolicy.from_settings(settings),
            keyring=Keyring.from_settings(settings),
        )
    except RepoError as exc:
        raise UsageError(f"{exc.field}: {exc.message}") from None
    except (ValueError, KeyringError) as exc:
        raise UsageError(str(exc)) from None
    # The id on stdout (for scripts); the secret is never echoed.
    print(record.id)
    print(f"# tenant={record.tenant_id} name={record.name} clone_url={record.clone_url}", file=sys.stderr)
    return 0


def cmd_repos_list(args: argparse.Namespace) -> int:
    from leasehold.records.ci.repos import list_repos

    for record in list_repos(open_database(admin_settings(args)), args.tenant):
        print(
            json.dumps(
                {
                    "id": record.id,
                    "name": record.name,
                    "clone_url": record.clone_url,
                    "default_branch": record.default_branch,
                }
            )
        )
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``repos`` subcommands to the top-level parser's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_data_dir_arguments(common)
    repos = sub.add_parser("repos", help="CI repositories")
    repos_sub = repos.add_subparsers(dest="repos_command", required=True)

    add = repos_sub.add_parser("add", parents=[common], help="register a repository for a tenant")
    add.add_argument("--tenant", required=True)
    add.add_argument("--name", required=True, help="full name, e.g. acme/widgets")
    add.add_argument("--clone-url", required=True, help="https:// URL, or a path below LEASEHOLD_CI_LOCAL_REPO_ROOT")
    add.add_argument("--webhook-secret", required=True, help="the secret webhooks are signed with")
    add.add_argument("--default-branch", default="main")
    add.add_argument("--github-id", type=int, default=None, help="the host's numeric repository id")
    add.set_defaults(func=cmd_repos_add)

    ls = repos_sub.add_parser("list", parents=[common], help="a tenant's repositories (JSON lines)")
    ls.add_argument("--tenant", required=True)
    ls.set_defaults(func=cmd_repos_list)
