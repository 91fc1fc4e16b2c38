"""``leasehold ci dispatch|push``: start CI runs through the API.

A tenant's actions, so they go through the API with the tenant's key (``--api-key`` or
``$LEASEHOLD_API_KEY``), which checks ownership and the inputs exactly as for any client:
``push`` needs no data dir, database or Temporal, so a ``post-receive`` hook on the machine
that hosts the repository can call it (docs/ci-push.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from cli.common import UsageError, command_settings
from cli.remote import Api, CliFailure, Exit, add_api_arguments, api_from, command, note, print_json


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


# push ------------------------------------------------------------------------------------------

# How long ``push`` waits for the push to list its runs (reading the workflow files at the
# commit); past it the push still runs, and the command says where to look.
PUSH_LIST_WAIT_SECONDS = 30.0
# Variables git sets in a hook (GIT_DIR=. in a bare repository's post-receive): they would
# point our own git calls at the hook's repository whatever path we give.
_GIT_LOCATION_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
    "GIT_PREFIX",
)


def _git(*args: str) -> str | None:
    """``git ARGS``' output, or None when git fails (not a repository, no such ref)."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARIABLES}
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        done = subprocess.run(
            ["git", *args], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise CliFailure("git is not installed (needed without --sha)", Exit.USAGE) from None
    except subprocess.TimeoutExpired:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _local_path(clone_url: str) -> str | None:
    """The real path of a local clone URL (a path or ``file://``), None for a remote one."""
    if clone_url.startswith("/"):
        return os.path.realpath(clone_url)
    parts = urlsplit(clone_url)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return os.path.realpath(unquote(parts.path))
    return None


def _find_repo(repos: list[dict[str, Any]], text: str) -> tuple[dict[str, Any], str | None]:
    """The registered repository ``text`` names, and the local directory it named (if any).

    A directory is matched by its real path against local clone URLs: the repository itself
    (a hook's ``$PWD``), or a working copy whose remote is one; otherwise ``text`` is an id or
    a full name.
    """
    directory = os.path.realpath(text) if os.path.isdir(text) else None
    if directory is not None:
        candidates = {directory}
        remotes = _git("-C", directory, "config", "--get-regexp", r"^remote\..*\.url$") or ""
        for line in remotes.splitlines():
            url = line.partition(" ")[2]
            # A relative remote (`git remote add origin ../x.git`) is relative to the working copy.
            local = _local_path(url) or (os.path.realpath(os.path.join(directory, url)) if url else None)
            if local is not None:
                candidates.add(local)
        found = [r for r in repos if _local_path(str(r.get("clone_url", ""))) in candidates]
        # The directory itself first, then one of its remotes.
        found.sort(key=lambda r: _local_path(str(r.get("clone_url", ""))) != directory)
        if found:
            return found[0], directory
        raise CliFailure(
            f"no repository registered for this key has the clone URL {directory} (or one of its remotes); "
            "register it with `leasehold repos add`, or name it by id or full name",
            Exit.NOT_FOUND,
        )
    for repo in repos:
        if text in (repo.get("id"), repo.get("name")):
            return repo, None
    raise CliFailure(f"no repository {text!r} for this key (an id, a full name, or a local directory)", Exit.NOT_FOUND)


def _full_ref(ref: str) -> str:
    return ref if ref.startswith("refs/") else f"refs/heads/{ref}"


def _resolve(clone_url: str, ref: str) -> tuple[str, str]:
    """(full ref, commit sha) of ``ref`` in the repository CI clones, as the worker will see it.

    ``ref`` may be short: a branch first, then a tag, as git resolves it; an annotated tag is
    peeled to its commit.
    """
    wanted = [ref] if ref.startswith("refs/") else [f"refs/heads/{ref}", f"refs/tags/{ref}"]
    listed = _git("ls-remote", "--", clone_url, *wanted, *(f"{w}^{{}}" for w in wanted))
    if listed is None:
        raise CliFailure(f"could not read {clone_url} with git ls-remote", Exit.UNREACHABLE)
    shas: dict[str, str] = {}
    for line in listed.splitlines():
        listed_sha, _, name = line.partition("\t")
        shas[name] = listed_sha
    for full in wanted:
        sha = shas.get(f"{full}^{{}}") or shas.get(full)
        if sha:
            return full, sha
    raise CliFailure(f"{clone_url} has no branch or tag {ref!r} (push it there first)", Exit.NOT_FOUND)


def _wait_listed(api: Api, push_id: str, within: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + within
    while True:
        push: dict[str, Any] = api.call("GET", f"/v1/pushes/{push_id}")
        if push.get("status") != "listing" or time.monotonic() >= deadline:
            return push if push.get("status") != "listing" else None
        time.sleep(0.5)


@command
def cmd_ci_push(args: argparse.Namespace) -> int:
    """Start the runs of a commit, as a push of it to its ref would (``POST /v1/hooks/push``)."""
    api = api_from(args)
    repos = api.call("GET", "/v1/repos").get("data", [])
    repo, directory = _find_repo(repos, args.repo)
    ref = args.ref
    if ref is None and directory is not None and args.sha is None:
        # The working copy's branch; a detached HEAD has none to push to.
        ref = _git("-C", directory, "symbolic-ref", "-q", "HEAD")
    ref = ref or str(repo.get("default_branch") or "main")
    if args.sha is not None:
        full_ref, sha = _full_ref(ref), args.sha
    else:
        full_ref, sha = _resolve(str(repo.get("clone_url")), ref)
    accepted = api.call("POST", "/v1/hooks/push", json={"repo_id": repo["id"], "commit_sha": sha, "ref": full_ref})
    push = None if args.no_wait else _wait_listed(api, str(accepted["id"]), args.wait)
    if args.json:
        print_json(push or accepted)
        return int(Exit.OK)
    print(f"push {accepted['id']}: {repo.get('name')} {full_ref} at {sha[:12]}")
    if push is None:
        note(f"its runs are being listed: leasehold runs list --repo {repo['id']}")
        return int(Exit.OK)
    if push.get("error"):
        raise CliFailure(f"push {accepted['id']}: {push['error']}", Exit.FAILED)
    for run in push.get("runs", []):
        print(f"run {run['run_id']}  {run['workflow_path']}")
    if not push.get("runs"):
        note(f"no workflow file at {sha[:12]} runs on a push to {full_ref}")
    return int(Exit.OK)


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

    push = ci_sub.add_parser("push", help="start the runs of a commit, as a push of it would")
    push.add_argument(
        "repo", help="a local directory (the repository or a working copy of it), or the repository's id or full name"
    )
    push.add_argument(
        "--ref", default=None, help="branch, tag or full ref (default: the directory's branch, else the default branch)"
    )
    push.add_argument("--sha", default=None, help="the commit (default: what the ref names where CI clones from)")
    push.add_argument(
        "--wait",
        type=float,
        default=PUSH_LIST_WAIT_SECONDS,
        help=f"seconds to wait for the runs to be listed (default {PUSH_LIST_WAIT_SECONDS:.0f})",
    )
    push.add_argument("--no-wait", action="store_true", help="return once the push is accepted")
    add_api_arguments(push)
    push.set_defaults(func=cmd_ci_push)
