"""``leasehold ci dispatch``: run a workflow by hand (``workflow_dispatch``) through the API.

A tenant's action, so it goes through the API with the tenant's key (``--api-key`` or
``$LEASEHOLD_API_KEY``), which checks ownership and the inputs exactly as for any client.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from cli.common import UsageError, command_settings


def _input(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected name=value, got {text!r}")
    return name, value


def _json_input(text: str) -> tuple[str, Any]:
    name, value = _input(text)
    try:
        return name, json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: not JSON: {value!r}") from None


def cmd_ci_dispatch(args: argparse.Namespace) -> int:
    import httpx

    key = args.api_key or os.environ.get("LEASEHOLD_API_KEY")
    if not key:
        raise UsageError("an API key is needed: --api-key or LEASEHOLD_API_KEY")
    base = (args.api_url or command_settings(args).resolved_public_base_url).rstrip("/")
    inputs: dict[str, Any] = dict(args.field or [])
    inputs.update(dict(args.raw_field or []))
    headers = {"Authorization": f"Bearer {key}"}
    if args.idempotency_key:
        headers["Idempotency-Key"] = args.idempotency_key
    try:
        response = httpx.post(
            f"{base}/v1/repos/{args.repo}/dispatches",
            json={"workflow": args.workflow, "ref": args.ref, "inputs": inputs},
            headers=headers,
            timeout=60,
        )
    except httpx.HTTPError as exc:
        raise UsageError(f"the API at {base} did not answer: {exc}") from None
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            where = f" ({error['param']})" if error.get("param") else ""
            raise UsageError(f"{error['message']}{where}")
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"the API answered {response.status_code}") from None
    # The dispatch (push id, status, runs) on stdout, for scripts.
    print(json.dumps(response.json()))
    if response.status_code == 202:
        print("# still listing: GET /v1/pushes/<push_id> for its run", file=sys.stderr)
    return 0


def add_commands(sub: Any) -> None:
    """Add the ``ci`` subcommands to the top-level parser's subparsers."""
    ci = sub.add_parser("ci", help="CI runs (through the API)")
    ci_sub = ci.add_subparsers(dest="ci_command", required=True)
    dispatch = ci_sub.add_parser("dispatch", help="run a workflow by hand (workflow_dispatch)")
    dispatch.add_argument("repo", help="the repository id")
    dispatch.add_argument("workflow", help="file name ('deploy.yml') or path under .github/workflows")
    dispatch.add_argument("--ref", default="main", help="branch or tag (default: main)")
    dispatch.add_argument(
        "-f", "--field", action="append", type=_input, metavar="NAME=VALUE", help="a string input (repeatable)"
    )
    dispatch.add_argument(
        "-F", "--raw-field", action="append", type=_json_input, metavar="NAME=JSON", help="a JSON input: true, 3"
    )
    dispatch.add_argument("--idempotency-key", default=None, help="the same key sends the same dispatch once")
    dispatch.add_argument("--api-url", default=None, help="default: the settings' public base URL")
    dispatch.add_argument("--api-key", default=None, help="default: $LEASEHOLD_API_KEY")
    dispatch.add_argument("--data-dir", type=Path, default=None, help="data directory (for settings)")
    dispatch.set_defaults(func=cmd_ci_dispatch)
