"""Where outgoing webhooks may go: the URL rules and the address policy.

A tenant chooses the URL, so it must not make the deployment call its own control plane or
private network. The URL is checked when it is registered (scheme, no credentials, no literal
address the policy refuses) and again at every delivery, where the name is resolved, every
address it resolves to is checked, and the connection goes to a checked address (so a DNS
answer that changes between the check and the connect cannot take it elsewhere).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048
# NAT64's well-known prefix embeds an IPv4 address in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


class RefusedUrl(ValueError):
    """The URL or an address it resolves to is not one deliveries may reach."""


@dataclass(frozen=True)
class WebhookUrl:
    """A checked URL, split into what a pinned connection needs."""

    scheme: str
    host: str
    port: int
    # Path and query, as sent in the request line.
    target: str

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"

    def pinned(self, address: str) -> str:
        """The URL with the host replaced by ``address`` (the checked one)."""
        host = f"[{address}]" if ":" in address else address
        return f"{self.scheme}://{host}:{self.port}{self.target}"


def parse_url(url: str, schemes: Sequence[str]) -> WebhookUrl:
    """Split ``url``; ``RefusedUrl`` with a reason if it is not a URL deliveries may use."""
    if len(url) > MAX_URL_LENGTH:
        raise RefusedUrl(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise RefusedUrl("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise RefusedUrl("the URL cannot be parsed") from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise RefusedUrl(f"the URL's scheme must be one of: {', '.join(schemes)}")
    if parts.username is not None or parts.password is not None:
        raise RefusedUrl("the URL must not carry credentials")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise RefusedUrl("the URL has no host")
    if parts.fragment:
        raise RefusedUrl("the URL must not have a fragment")
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    return WebhookUrl(scheme=scheme, host=host, port=port or (443 if scheme == "https" else 80), target=target)


def _embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, Teredo, NAT64), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


class AddressPolicy:
    """Public unicast addresses only, plus the operator's allowed networks."""

    def __init__(self, allow_cidrs: Sequence[str] = ()) -> None:
        self._allowed = [ipaddress.ip_network(cidr, strict=False) for cidr in allow_cidrs]

    def allows(self, text: str) -> bool:
        try:
            address: IPAddress = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            return False
        # An IPv6 address that carries an IPv4 one reaches that one: judge it.
        address = _embedded_ipv4(address)
        if any(address in net for net in self._allowed if net.version == address.version):
            return True
        return address.is_global and not address.is_multicast and not address.is_reserved

    def check_literal(self, url: WebhookUrl) -> None:
        """At registration: a literal address (or ``localhost``) the policy refuses."""
        host = url.host
        if host.lower() == "localhost" or host.lower().endswith(".localhost"):
            if not self.allows("127.0.0.1"):
                raise RefusedUrl("the URL points at this host")
            return
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return  # a name: resolved and checked at every delivery
        if not self.allows(host):
            raise RefusedUrl(f"the address {host} is not one deliveries may reach")

    def resolve(self, url: WebhookUrl, resolver: Resolver | None = None) -> str:
        """The address to connect to: every address the host resolves to must be allowed."""
        addresses = (resolver or system_resolver)(url.host, url.port)
        if not addresses:
            raise RefusedUrl(f"{url.host} does not resolve")
        for address in addresses:
            if not self.allows(address):
                raise RefusedUrl(f"{url.host} resolves to {address}, which deliveries may not reach")
        return addresses[0]


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RefusedUrl(f"{host} does not resolve ({exc})") from None
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen
