"""``leasehold runs artifacts RUN [--download NAME] [-o FILE]``: a run's artifacts (what its jobs
uploaded with ``actions/upload-artifact``), and one's zip."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli.remote import CliFailure, Exit, api_from, command, note, print_json, table


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


@command
def cmd_artifacts(args: argparse.Namespace) -> int:
    api = api_from(args)
    listed: dict[str, Any] = api.call("GET", f"/v1/runs/{args.run}/artifacts")
    found = listed.get("data", [])
    if args.download is None:
        if args.json:
            print_json(listed)
        else:
            rows = [[str(a["id"]), a["name"], _size(int(a["size"])), a["job_id"], a["expires_at"][:10]] for a in found]
            table(f"artifacts of {args.run}", ["id", "name", "size", "job", "expires"], rows, whole=("id", "name"))
        return int(Exit.OK)
    chosen = [a for a in found if a["name"] == args.download]
    if not chosen:
        raise CliFailure(f"run {args.run} has no artifact named {args.download!r}", Exit.NOT_FOUND)
    target = Path(args.output or f"{args.download}.zip")
    response = api.send("GET", chosen[0]["download_url"])
    target.write_bytes(response.content)
    note(f"wrote {target} ({_size(len(response.content))})")
    return int(Exit.OK)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--download", metavar="NAME", default=None, help="write this artifact's zip")
    parser.add_argument("-o", "--output", default=None, help="where (default: NAME.zip)")
