"""What every ``leasehold`` subcommand shares: the one-line error, the settings it reads, and
the data dir an admin command opens."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from leasehold.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.orm import sessionmaker

    from leasehold.records.base import FieldError


class UsageError(Exception):
    """A problem the user can fix; printed as one line."""


def command_settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Settings for one command: the environment, ``--data-dir`` and the command's own flags.

    A bad value becomes a `UsageError` naming the setting, not a pydantic traceback.
    """
    values = {k: v for k, v in overrides.items() if v is not None}
    if getattr(args, "data_dir", None) is not None:
        values["data_dir"] = args.data_dir
    try:
        return Settings(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"invalid setting {field} (LEASEHOLD_{field.upper()}): {first['msg']}") from None


# Admin commands: the deployment's own records --------------------------------------------------


def add_data_dir_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data-dir`` and ``--init``, on every admin command that opens the database."""
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="data directory (default: $LEASEHOLD_DATA_DIR or ./.leasehold)"
    )
    parser.add_argument(
        "--init",
        action="store_true",
        help="create the database if no stack has (default: refuse a data dir no stack initialised)",
    )


def admin_parent(
    *, tenant: bool = True, repo: str | None = None, repo_required: bool = False
) -> argparse.ArgumentParser:
    """The arguments an admin command's subcommands share (``parents=[...]``): the data dir,
    ``--tenant`` unless not ``tenant``, and ``--repo`` (its help) when ``repo`` is given."""
    parent = argparse.ArgumentParser(add_help=False)
    add_data_dir_arguments(parent)
    if tenant:
        parent.add_argument("--tenant", required=True)
    if repo is not None:
        parent.add_argument("--repo", required=repo_required, default=None, help=repo)
    return parent


def add_command(
    sub: Any,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    parent: argparse.ArgumentParser,
    *names: str,
) -> argparse.ArgumentParser:
    """Subcommand ``name`` of ``sub`` running ``func``: ``parent``'s arguments, then the plain
    positional ``names``; returned for any argument of its own."""
    parser = sub.add_parser(name, parents=[parent], help=help)
    for positional in names:
        parser.add_argument(positional)
    parser.set_defaults(func=func)
    return parser


def database_exists(settings: Settings) -> bool:
    """Whether the deployment's database is there: the SQLite file exists (in the data dir by
    default); a server database (``LEASEHOLD_DATABASE_URL``) was named on purpose, so it counts."""
    from sqlalchemy.engine import make_url

    url = make_url(settings.resolved_database_url)
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return True
    return Path(database).is_file()


def _initialised(data_dir: Path) -> bool:
    return (data_dir / "leasehold.db").is_file()


def data_dirs_in_use(besides: Path) -> list[str]:
    """Initialised data dirs other than ``besides``, each saying how it was found: a running
    ``leasehold up``'s, ``$LEASEHOLD_DATA_DIR``, the default ``./.leasehold``."""
    from cli.stack_lock import running_stacks

    found: dict[Path, str] = {}
    for pid, data_dir in running_stacks():
        found.setdefault(data_dir, f"{data_dir} (leasehold up, pid {pid})")
    for named, how in ((os.environ.get("LEASEHOLD_DATA_DIR"), "LEASEHOLD_DATA_DIR"), (".leasehold", "./.leasehold")):
        if named and _initialised(path := Path(named).expanduser().resolve()):
            found.setdefault(path, f"{path} ({how})")
    return [how for data_dir, how in found.items() if data_dir != besides]


def admin_settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """`command_settings` for an admin command, refusing a database no stack has initialised.

    Opening the database creates it, so a mistyped ``--data-dir`` (or none, in another working
    directory) would silently start a second, empty deployment beside the one the stack uses:
    a repository registered there is one the stack never sees. ``--init`` is how a new one
    is started on purpose.
    """
    settings = command_settings(args, **overrides)
    if getattr(args, "init", False) or database_exists(settings):
        return settings
    if settings.database_url:
        where = f"database {settings.database_url}"
    else:
        where = f"data dir {settings.data_dir}"
    others = data_dirs_in_use(settings.data_dir)
    in_use = f"; in use: {', '.join(others)}" if others else ""
    raise UsageError(
        f"{where} has no leasehold database (no stack has initialised it){in_use}: name the stack's "
        "with --data-dir or LEASEHOLD_DATA_DIR, or create one here with --init"
    )


def open_database(settings: Settings) -> sessionmaker:
    """The deployment's database (migrated to the newest revision), the data dir made first."""
    from leasehold.database import init_database

    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"data dir {settings.data_dir} is not writable: {exc.strerror or exc}") from None
    return init_database(settings.resolved_database_url)


def check_scope(factory: sessionmaker, args: argparse.Namespace) -> None:
    """``--tenant`` is a valid tenant name and ``--repo``, when given, one of its repositories
    (the scope a secret or a variable is written to)."""
    from leasehold.records.api_keys import validate_name
    from leasehold.records.ci.repos import get_repo

    try:
        validate_name("tenant", args.tenant)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.repo is not None and get_repo(factory, args.tenant, args.repo) is None:
        raise UsageError(f"repository {args.repo!r} is not registered for tenant {args.tenant!r}")


def scoped_database(args: argparse.Namespace, check: bool = True) -> tuple[Settings, sessionmaker]:
    """The settings and database of an admin command scoped by ``--tenant`` and ``--repo``,
    the scope checked (`check_scope`) unless not ``check``."""
    settings = admin_settings(args)
    factory = open_database(settings)
    if check:
        check_scope(factory, args)
    return settings, factory


def read_stdin_value() -> str:
    """A value piped in: a trailing newline comes from `echo` or a file, not from the value."""
    value = sys.stdin.read()
    if value.endswith("\n"):
        value = value[:-1].removesuffix("\r")
    return value


@contextmanager
def field_errors(error: type[FieldError]) -> Iterator[None]:
    """A record module's ``error`` raised inside, as a `UsageError` naming its field."""
    try:
        yield
    except error as exc:
        raise UsageError(f"{exc.field}: {exc.message}") from None


def _scope(args: argparse.Namespace) -> str:
    if getattr(args, "environment", None):
        return f"environment {args.environment} of repository {args.repo}"
    return f"repository {args.repo}" if args.repo else f"tenant {args.tenant}"


def put_scoped(
    args: argparse.Namespace, kind: str, error: type[FieldError], put: Callable[[], tuple[Any, bool]]
) -> int:
    """Create or replace the ``kind`` (secret, variable) ``put`` writes, and say which it did."""
    with field_errors(error):
        info, created = put()
    print(f"{'created' if created else 'updated'} {kind} {info.name} for {_scope(args)}", file=sys.stderr)
    return 0


def delete_scoped(args: argparse.Namespace, kind: str, error: type[FieldError], delete: Callable[[], bool]) -> int:
    """Delete the ``kind`` named ``args.name``; a name that is not there is a `UsageError`."""
    with field_errors(error):
        removed = delete()
    if not removed:
        raise UsageError(f"no {kind} {args.name!r}")
    return 0
