"""The files a step writes to talk to the runner (GitHub's environment files): ``$GITHUB_PATH``
entries and the ``name=value`` / ``name<<DELIM`` blocks of ``$GITHUB_OUTPUT`` and ``$GITHUB_ENV``."""

from __future__ import annotations

# At most this many directories a job may add to PATH through $GITHUB_PATH.
MAX_PATH_ENTRIES = 64


def read_path_file(text: str) -> list[str]:
    """Directories a step appended to ``$GITHUB_PATH``, one per line, in order."""
    entries = [line.strip() for line in text.splitlines()]
    return [e for e in entries if e and "\0" not in e][:MAX_PATH_ENTRIES]


def read_output_file(text: str) -> dict[str, str]:
    """``name=value`` and ``name<<DELIM`` blocks (``$GITHUB_OUTPUT``, ``$GITHUB_ENV``)."""
    values: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            body: list[str] = []
            while i < len(lines) and lines[i] != delim:
                body.append(lines[i])
                i += 1
            i += 1
            values[name.strip()] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            values[name.strip()] = value
    return values
