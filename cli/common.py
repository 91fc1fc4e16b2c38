"""What every ``leasehold`` subcommand shares: the one-line error and the settings it reads."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError

from leasehold.settings import Settings


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
