"""``jobs.<id>.container`` and ``jobs.<id>.services``: the job's image and its service containers.

Only what keeps a job inside its sandbox is accepted: an image of the deployment's registry
mirror (named as on Docker Hub), ``env``, ``ports`` and the ``--health-*`` and ``--env``
options. ``--privileged``, capabilities, devices, host mounts (``volumes:``, ``-v``,
``--mount``), another network (``--network host``) and every other option are refused with
the key at fault, when the push is listed.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from actions_language.loader import YamlMap
from actions_language.schema import FileContext, check_keys, named_entries, scalar_text
from workflows.ci.types.spec import ContainerSpec

CONTAINER_KEYS = {"image", "env", "ports", "options", "volumes", "credentials"}
MAX_SERVICES = 10
# A service's key is its hostname on the job's network.
SERVICE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_NAME = re.compile(
    rf"^(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
PORT = re.compile(r"^(?:(\d{1,5}):)?(\d{1,5})(?:/tcp)?$")
DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_HEALTH_RETRIES = 100

# Options that would let the container out of its sandbox, and why each is refused: GitHub
# passes them to Docker, so the file is valid; this deployment does not support them.
_HOST_MOUNTS = "host mounts: a job sees only its workspace"
_NAMESPACES = "containers never share the host's namespaces"
_WHY_REFUSED = {
    "--privileged": "jobs and services never run privileged",
    "--cap-add": "containers run with no capabilities",
    "--device": "containers get no host devices",
    "-v": _HOST_MOUNTS,
    "--volume": _HOST_MOUNTS,
    "--mount": _HOST_MOUNTS,
    "--volumes-from": _HOST_MOUNTS,
    "--network": "each job has its own private network; host network is never given",
    "--net": "each job has its own private network; host network is never given",
    "--pid": _NAMESPACES,
    "--ipc": _NAMESPACES,
    "--uts": _NAMESPACES,
    "--userns": _NAMESPACES,
    "--cgroupns": _NAMESPACES,
    "--security-opt": "the sandbox's seccomp and no-new-privileges always apply",
    "--user": "the job runs as its own unprivileged user",
    "-u": "the job runs as its own unprivileged user",
}
REFUSED_OPTIONS = {
    name: f"{name} is refused: not supported by this deployment ({why})" for name, why in _WHY_REFUSED.items()
}
HEALTH_OPTIONS = ("--health-cmd", "--health-interval", "--health-timeout", "--health-retries", "--health-start-period")
SUPPORTED_OPTIONS = (*HEALTH_OPTIONS, "--env", "-e")


def _no_expression(ctx: FileContext, text: str, line: int | None, key: str) -> str:
    if "${{" in text:
        raise ctx.fail(line, key, "expressions are not supported here")
    return text


def image_name(ctx: FileContext, value: Any, line: int | None, key: str) -> str:
    """A repository path of the registry mirror, with an optional tag and digest."""
    text = _no_expression(ctx, scalar_text(ctx, value, line, key), line, key).strip()
    text = text.removeprefix("docker.io/")
    match = IMAGE_NAME.match(text)
    if match is None or len(text) > 255:
        raise ctx.fail(line, key, "must be an image name such as postgres:15 or owner/name:tag")
    first = match["path"].split("/")[0]
    if "/" in match["path"] and ("." in first or first == "localhost"):
        raise ctx.fail(
            line,
            key,
            "images of another registry host are not supported by this deployment (its images come "
            "from its registry mirror): name them without a registry host",
        )
    return text


def _seconds(ctx: FileContext, text: str, line: int | None, key: str) -> float:
    if not DURATION.match(text):
        raise ctx.fail(line, key, f"{text!r} is not a duration such as 10s, 1m30s or 500ms")
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
    if not 0 < seconds <= 3600:
        raise ctx.fail(line, key, "must be more than 0 and at most 1h")
    return seconds


def _option_pairs(ctx: FileContext, text: str, line: int | None, key: str) -> list[tuple[str, str]]:
    """``options:`` as (option, value) pairs; refuses every option but the supported ones."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ctx.fail(line, key, f"cannot be split into words: {exc}") from None
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in REFUSED_OPTIONS or (name.startswith("-v") and not name.startswith("--")):
            raise ctx.fail(line, key, REFUSED_OPTIONS.get(name, REFUSED_OPTIONS["-v"]))
        if name not in SUPPORTED_OPTIONS:
            raise ctx.fail(line, key, f"{name} is not supported here (supported: {', '.join(SUPPORTED_OPTIONS)})")
        if eq:
            pairs.append((name, inline))
            i += 1
        elif i + 1 < len(words):
            pairs.append((name, words[i + 1]))
            i += 2
        else:
            raise ctx.fail(line, key, f"{name} needs a value")
    return pairs


def _apply_options(ctx: FileContext, spec: ContainerSpec, text: str, line: int | None, key: str) -> None:
    for name, value in _option_pairs(ctx, text, line, key):
        if name in ("--env", "-e"):
            env_key, eq, env_value = value.partition("=")
            if not eq or not env_key:
                raise ctx.fail(line, key, f"{name} {value!r}: write NAME=value")
            spec.env.setdefault(env_key, env_value)
        elif name == "--health-cmd":
            if not value.strip():
                raise ctx.fail(line, key, "--health-cmd must not be empty")
            spec.health_cmd = value
        elif name == "--health-retries":
            if not value.isdigit() or not 0 < int(value) <= MAX_HEALTH_RETRIES:
                raise ctx.fail(line, key, f"--health-retries must be a whole number from 1 to {MAX_HEALTH_RETRIES}")
            spec.health_retries = int(value)
        else:
            seconds = _seconds(ctx, value, line, f"{key} {name}")
            field = name.removeprefix("--").replace("-", "_") + "_seconds"
            setattr(spec, field, seconds)


def _ports(ctx: FileContext, value: Any, line: int | None, key: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    ports = []
    for item in items:
        text = scalar_text(ctx, item, line, key).strip()
        match = PORT.match(text)
        if match is None or not all(0 < int(p) < 65536 for p in match.groups() if p is not None):
            raise ctx.fail(line, key, f"{text!r} is not a port such as 5432 or 8080:80 (tcp)")
        ports.append(text.removesuffix("/tcp"))
    return ports


def container_spec(ctx: FileContext, raw: Any, line: int | None, where: str) -> ContainerSpec:
    """One ``container:`` (a string is its image) or one service's mapping."""
    if not isinstance(raw, YamlMap):
        if isinstance(raw, str):
            return ContainerSpec(image=image_name(ctx, raw, line, where), line=line)
        raise ctx.fail(line, where, "must be an image name or a mapping with 'image'")
    check_keys(ctx, raw, CONTAINER_KEYS, f"{where}.")

    def ln(key: str) -> int | None:
        return raw.key_lines.get(key, raw.line)

    if "volumes" in raw:
        raise ctx.fail(
            ln("volumes"),
            f"{where}.volumes",
            "host mounts are refused: not supported by this deployment (a job sees only its workspace)",
        )
    if "credentials" in raw:
        raise ctx.fail(
            ln("credentials"),
            f"{where}.credentials",
            "registry credentials are not supported by this deployment (its images come from its registry mirror)",
        )
    if "image" not in raw:
        raise ctx.fail(raw.line, where, "needs 'image'")
    spec = ContainerSpec(image=image_name(ctx, raw["image"], ln("image"), f"{where}.image"), line=line)
    if "env" in raw:
        env = raw["env"]
        if not isinstance(env, YamlMap):
            raise ctx.fail(ln("env"), f"{where}.env", "must be a mapping")
        for name, value, vline in named_entries(ctx, env, f"{where}.env"):
            spec.env[name] = _no_expression(ctx, scalar_text(ctx, value, vline, f"{where}.env.{name}"), vline, name)
    if "ports" in raw:
        spec.ports = _ports(ctx, raw["ports"], ln("ports"), f"{where}.ports")
    if "options" in raw:
        text = _no_expression(ctx, scalar_text(ctx, raw["options"], ln("options"), f"{where}.options"), line, where)
        _apply_options(ctx, spec, text, ln("options"), f"{where}.options")
    return spec


def services_spec(ctx: FileContext, raw: Any, line: int | None, where: str) -> dict[str, ContainerSpec]:
    if not isinstance(raw, YamlMap):
        raise ctx.fail(line, where, "must be a mapping of service names to containers")
    if len(raw) > MAX_SERVICES:
        raise ctx.fail(line, where, f"at most {MAX_SERVICES} services per job")
    services: dict[str, ContainerSpec] = {}
    for name, value, kline in named_entries(ctx, raw, where):
        if not SERVICE_KEY.match(name):
            raise ctx.fail(kline, f"{where}.{name}", "service keys are hostnames: letters, digits, '-' and '_'")
        if name.lower() in services:
            raise ctx.fail(kline, f"{where}.{name}", "two services with the same hostname")
        if not isinstance(value, YamlMap):
            raise ctx.fail(kline, f"{where}.{name}", "must be a mapping with 'image'")
        services[name.lower()] = container_spec(ctx, value, kline, f"{where}.{name}")
    return services
