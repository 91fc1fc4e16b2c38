"""The shells a step's ``run:`` script runs with, spelled as GitHub's runner spells them, and a
custom shell's argument string split as that runner splits it."""

from __future__ import annotations


def shell_argv(shell: str, script: str) -> list[str]:
    """The command a step's ``shell`` runs its script with, as GitHub spells each shell."""
    if shell == "bash":
        return ["bash", "--noprofile", "--norc", "-eo", "pipefail", script]
    if shell == "sh":
        return ["sh", "-e", script]
    if shell == "python":
        return ["python3", script]
    # A custom 'command [options] {0}' (validated by the parser): the first word is the
    # command, the rest its arguments with {0} replaced, split as GitHub's runner splits them.
    command, _, rest = shell.partition(" ")
    return [command, *split_arguments(rest.replace("{0}", script))]


def split_arguments(text: str) -> list[str]:
    """An argument string split as the .NET runtime splits one for a new process (GitHub's
    runner passes a custom shell's arguments that way): whitespace separates arguments outside
    double quotes; ``\\"`` is a literal quote, ``""`` inside quotes one quote; 2n backslashes
    before a quote are n backslashes (and the quote opens or closes), other backslashes are
    literal; single quotes are ordinary characters."""
    args: list[str] = []
    current: list[str] = []
    in_arg = quoted = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            run = len(text[i:]) - len(text[i:].lstrip("\\"))
            if i + run < len(text) and text[i + run] == '"':
                current.append("\\" * (run // 2))
                if run % 2:
                    current.append('"')
                    i += run + 1
                else:
                    i += run
            else:
                current.append("\\" * run)
                i += run
            in_arg = True
            continue
        if c == '"':
            if quoted and text.startswith('""', i):
                current.append('"')
                i += 2
                continue
            quoted = not quoted
            in_arg = True
        elif c in " \t" and not quoted:
            if in_arg:
                args.append("".join(current))
                current, in_arg = [], False
        else:
            current.append(c)
            in_arg = True
        i += 1
    if in_arg:
        args.append("".join(current))
    return args
