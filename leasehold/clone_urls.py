"""Where a tenant's ``clone_url`` may point: the operator's allow-list, checked twice.

A clone URL is chosen by a tenant, so the worker must never be made to read the host's files,
another tenant's mirror (under the data dir, at a path that follows from its repository id) or
a service on the host's loopback or private network. The rules:

- Remote URLs: a scheme from ``ci_clone_schemes`` (``https`` by default), a host from
  ``ci_clone_hosts`` (empty: any public host name), and at connect time every address the host
  resolves to must be public (not loopback, link-local, private, CGNAT, unspecified,
  multicast, reserved or a cloud metadata address) unless a CIDR of
  ``ci_clone_allow_private`` holds it. Metadata addresses are refused even then.
- Local paths (absolute, or ``file://``): only below ``ci_local_repo_root`` (unset: refused),
  compared after ``realpath`` so ``..`` and symlinks cannot leave it, and never inside the
  data dir.

``parse`` is pure and runs at registration and again on the worker before every clone or fetch
(the settings may have changed; a row may predate the rules). ``resolve_checked`` runs on the
worker only: it resolves the host itself, so the caller can pin git to the addresses checked
here and a DNS answer that changes in between (rebinding) is never used.

Reasons given to tenants never depend on whether a path exists or what a host resolves to.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from leasehold.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses it resolves to, as text.
Resolver = Callable[[str, int], list[str]]

REMOTE_SCHEMES = frozenset({"https", "http"})
DEFAULT_PORTS = {"https": 443, "http": 80}
# Cloud metadata services: refused even where an operator allows private ranges around them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Lower-case DNS names with at least one dot; the last label starts with a letter, so numeric
# forms a resolver would read as an IPv4 address ("2130706433", "127.1", "0x7f.1") never pass.
_HOST_NAME = re.compile(r"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# Names that resolve to the machine itself or its private network wherever they resolve.
_LOCAL_SUFFIXES = ("localhost", "localdomain", "local", "internal", "home.arpa", "arpa")

# What a tenant is told; the same whatever the host or path really is.
LOCAL_OUTSIDE_ROOT = "a local clone_url must be below the operator's local repository root, outside the data directory"
ADDRESS_REFUSED = "clone_url's host does not resolve to an address CI may connect to"


class CloneUrlRefused(ValueError):
    """A clone URL the policy does not allow. ``reason`` is safe to show the tenant;
    ``detail`` (what exactly was refused) is for the server's log only."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail or reason


@dataclass(frozen=True)
class LocalRepo:
    """A local repository: ``path`` is its real path, the one git must be given."""

    path: Path


@dataclass(frozen=True)
class RemoteRepo:
    """A remote repository URL; ``ip_literal`` when the host is an address, not a name."""

    url: str
    scheme: str
    host: str
    port: int
    ip_literal: bool


@dataclass(frozen=True)
class ClonePolicy:
    """The operator's rules for clone URLs (see the module docstring)."""

    schemes: frozenset[str] = frozenset({"https"})
    hosts: tuple[str, ...] = ()
    allow_private: tuple[IPNetwork, ...] = ()
    local_root: Path | None = None
    # Directories a local path may never name or enter: the data dir, the mirrors.
    forbidden_dirs: tuple[Path, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> ClonePolicy:
        """The policy of ``settings``; raises ``ValueError`` for an unknown scheme or a bad CIDR."""
        schemes = frozenset(s.strip().lower() for s in settings.ci_clone_schemes if s.strip())
        unknown = schemes - REMOTE_SCHEMES
        if unknown:
            raise ValueError(f"ci_clone_schemes: unsupported scheme(s) {sorted(unknown)}; allowed: https, http")
        networks = []
        for cidr in settings.ci_clone_allow_private:
            try:
                networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
            except ValueError:
                raise ValueError(f"ci_clone_allow_private: {cidr!r} is not a CIDR") from None
        return cls(
            schemes=schemes,
            hosts=tuple(h.strip().lower() for h in settings.ci_clone_hosts if h.strip()),
            allow_private=tuple(networks),
            local_root=settings.ci_local_repo_root,
            forbidden_dirs=(settings.data_dir,),
        )

    def forbidding(self, *dirs: Path) -> ClonePolicy:
        """This policy, also refusing local paths inside ``dirs``."""
        return replace(self, forbidden_dirs=(*self.forbidden_dirs, *dirs))


def parse(value: str, policy: ClonePolicy) -> LocalRepo | RemoteRepo:
    """Check ``value`` against ``policy`` without touching the network; raises ``CloneUrlRefused``."""
    if not value or value != value.strip() or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise CloneUrlRefused("clone_url must not be empty or contain spaces around it or control characters")
    if value.startswith("/"):
        return _local(value, policy)
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise CloneUrlRefused("a file:// clone_url must name an absolute local path")
        return _local(unquote(parts.path), policy)
    if scheme in REMOTE_SCHEMES and scheme in policy.schemes:
        return _remote(value, policy)
    allowed = [f"{s}://" for s in sorted(policy.schemes)]
    if policy.local_root is not None:
        allowed.append("a local path below the operator's local repository root")
    raise CloneUrlRefused(f"clone_url must be {' or '.join(allowed) or 'nothing: no clone URL is allowed'}")


def _local(path: str, policy: ClonePolicy) -> LocalRepo:
    if policy.local_root is None:
        raise CloneUrlRefused("local clone_url paths are disabled here (LEASEHOLD_CI_LOCAL_REPO_ROOT is not set)")
    # realpath without strict: the same answer whether or not the path exists.
    real = Path(os.path.realpath(path))
    root = Path(os.path.realpath(policy.local_root))
    inside_forbidden = any(real.is_relative_to(os.path.realpath(d)) for d in policy.forbidden_dirs)
    if not real.is_relative_to(root) or inside_forbidden:
        raise CloneUrlRefused(LOCAL_OUTSIDE_ROOT, f"local path {path!r} (real {real}) is outside {root} or forbidden")
    return LocalRepo(path=real)


def _remote(value: str, policy: ClonePolicy) -> RemoteRepo:
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if parts.username is not None or parts.password is not None:
        raise CloneUrlRefused("clone_url must not embed credentials")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise CloneUrlRefused("clone_url has an invalid port") from None
    host = (parts.hostname or "").lower()
    if not host or not parts.path.strip("/"):
        raise CloneUrlRefused(f"a {scheme}:// clone_url needs a host and a repository path")
    ip: IPAddress | None = None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    if ip is not None:
        reason = address_refusal(ip, policy.allow_private)
        if reason is not None:
            raise CloneUrlRefused("clone_url's host is not a public address", f"{host}: {reason}")
    if policy.hosts:
        if not any(_host_matches(host, pattern) for pattern in policy.hosts):
            raise CloneUrlRefused("clone_url's host is not among the hosts this deployment clones from")
    elif ip is None and (not _HOST_NAME.match(host) or _is_local_name(host)):
        raise CloneUrlRefused("clone_url's host must be a public host name (like git.example.com) or address")
    return RemoteRepo(url=value, scheme=scheme, host=host, port=port, ip_literal=ip is not None)


def _host_matches(host: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _is_local_name(host: str) -> bool:
    return any(host == s or host.endswith("." + s) for s in _LOCAL_SUFFIXES)


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries to a v4 host (mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IPAddress, allow_private: Iterable[IPNetwork] = ()) -> str | None:
    """Why CI may not connect to ``ip`` (for logs), or None when it may."""
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        v4 = _embedded_v4(ip)
        if v4 is not None:
            if v4 in METADATA_ADDRESSES:
                return "a cloud metadata address"
            if ip.ipv4_mapped is not None:
                return address_refusal(v4, allow_private)
            inner = address_refusal(v4, allow_private)
            if inner is not None:
                return f"carries {v4}, {inner}"
    if any(ip.version == net.version and ip in net for net in allow_private):
        return None
    checks = (
        (ip.is_loopback, "loopback"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_reserved, "reserved"),
        (ip.version == 4 and ip in _CGNAT, "shared address space (CGNAT)"),
        (ip.is_private, "private"),
        (not ip.is_global, "not globally routable"),
    )
    for refused, why in checks:
        if refused:
            return why
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to now (TCP), through the system resolver."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def resolve_checked(repo: RemoteRepo, policy: ClonePolicy, resolver: Resolver = system_resolver) -> list[str]:
    """The addresses git may connect to for ``repo``: all of them checked, none refused.

    Raises ``CloneUrlRefused`` when the name does not resolve or ANY address is refused (a
    name that answers with one public and one loopback address is refused as a whole), with
    the same reason either way.
    """
    if repo.ip_literal:
        answers = [repo.host]
    else:
        try:
            answers = resolver(repo.host, repo.port)
        except (OSError, UnicodeError) as exc:
            raise CloneUrlRefused(ADDRESS_REFUSED, f"{repo.host}: does not resolve ({exc})") from None
    checked: list[str] = []
    for answer in answers:
        try:
            ip = ipaddress.ip_address(answer.split("%", 1)[0])
        except ValueError:
            raise CloneUrlRefused(ADDRESS_REFUSED, f"{repo.host}: unparsable address {answer!r}") from None
        reason = address_refusal(ip, policy.allow_private)
        if reason is not None:
            raise CloneUrlRefused(ADDRESS_REFUSED, f"{repo.host} resolves to {ip}: {reason}")
        if str(ip) not in checked:
            checked.append(str(ip))
    if not checked:
        raise CloneUrlRefused(ADDRESS_REFUSED, f"{repo.host}: no addresses")
    return checked
