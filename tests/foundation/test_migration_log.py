"""What a process opening the database says about the migrations: one line, the revision it
is at, instead of Alembic's narration (its plugins, context and every step, ~17 lines)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

from alembic.script import ScriptDirectory

from leasehold.migrations.runner import alembic_config
from testing.harness import REPO_ROOT

# A process as `leasehold up` starts one: every record at INFO and above on stderr, then the
# database opened (alembic imported for the first time there).
_OPEN = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from leasehold.database import init_database
    init_database(sys.argv[1])
    print(logging.getLogger("alembic").level)
    """
)


def _open(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _OPEN, url], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )


def test_opening_a_database_says_one_line_naming_the_revision(tmp_path: Path) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    url = f"sqlite:///{tmp_path / 'leasehold.db'}"
    line = f"INFO leasehold.migrations.runner: database at revision {head}"
    new = _open(url)  # every revision applied
    assert new.stderr.splitlines() == [line], new.stderr
    again = _open(url)  # already at head
    assert again.stderr.splitlines() == [line], again.stderr
    # Alembic's own logger is left as it was found, for whoever configures it.
    assert new.stdout.strip() == str(logging.NOTSET)
