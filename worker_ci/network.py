"""Network for CI jobs whose tenant's plan allows it: never the host's.

The job keeps its own network namespace (bubblewrap's ``--unshare-net``); ``slirp4netns``, a
user-mode TCP/IP stack, gives it a ``tap0`` device whose traffic leaves as ordinary sockets of
the slirp4netns process, with ``--disable-host-loopback`` so its gateway address does not
lead to the host's 127.0.0.1. On top, an nftables ruleset inside the job's namespace (loaded
by the root worker before the job's first instruction; the job has no capability to change
it) rejects every destination in loopback, link-local (the cloud metadata address included),
private, shared (CGNAT), multicast and reserved ranges, except DNS to slirp4netns's resolver
and the ranges the operator allow-lists. Both are needed: the flag alone would still let a job
reach the host's other addresses and the private network around it.
"""

from __future__ import annotations

import ipaddress
import os
import select
import shutil
import subprocess
from dataclasses import dataclass, field

# slirp4netns's defaults: the job is 10.0.2.100, the gateway 10.0.2.2, DNS 10.0.2.3.
SLIRP_DNS = "10.0.2.3"
SETUP_TIMEOUT_SECONDS = 10.0

BLOCKED_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/3",
)
BLOCKED_V6 = (
    "::/127",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "100::/64",
    "2001:db8::/32",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
)


class NetworkUnavailable(RuntimeError):
    """This worker cannot give a job a filtered network."""


def ruleset(allowed: list[str]) -> str:
    """The nftables ruleset loaded into a job's network namespace."""
    v4 = [c for c in allowed if ipaddress.ip_network(c, strict=False).version == 4]
    v6 = [c for c in allowed if ipaddress.ip_network(c, strict=False).version == 6]
    lines = [
        "table inet leasehold {",
        "  chain out {",
        "    type filter hook output priority 0; policy accept;",
        '    oifname "lo" accept',
        f"    ip daddr {SLIRP_DNS} udp dport 53 accept",
        f"    ip daddr {SLIRP_DNS} tcp dport 53 accept",
    ]
    if v4:
        lines.append(f"    ip daddr {{ {', '.join(v4)} }} accept")
    if v6:
        lines.append(f"    ip6 daddr {{ {', '.join(v6)} }} accept")
    lines += [
        f"    ip daddr {{ {', '.join(BLOCKED_V4)} }} reject with icmp type admin-prohibited",
        f"    ip6 daddr {{ {', '.join(BLOCKED_V6)} }} reject with icmpv6 type admin-prohibited",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class UserModeNetwork:
    """slirp4netns plus an egress filter; ``attach`` is called with the sandbox's init pid
    while bubblewrap holds the job back (``--block-fd``)."""

    allowed_cidrs: list[str] = field(default_factory=list)
    slirp: str = ""
    nft: str = ""
    nsenter: str = ""

    @classmethod
    def detect(cls, allowed_cidrs: list[str]) -> UserModeNetwork:
        for cidr in allowed_cidrs:
            ipaddress.ip_network(cidr, strict=False)  # ValueError names a bad setting
        tools = {name: shutil.which(name) for name in ("slirp4netns", "nft", "nsenter")}
        missing = [name for name, path in tools.items() if path is None]
        if missing:
            raise NetworkUnavailable(
                f"jobs with network need {', '.join(missing)} (apt-get install slirp4netns nftables util-linux)"
            )
        if os.geteuid() != 0:
            raise NetworkUnavailable("the egress filter needs the CI worker to run as root")
        return cls(list(allowed_cidrs), tools["slirp4netns"] or "", tools["nft"] or "", tools["nsenter"] or "")

    def attach(self, pid: int) -> subprocess.Popen[bytes]:
        """Filter, then connect, the network namespace of ``pid``; returns slirp4netns, which
        the caller terminates when the step ends."""
        # The filter goes in first: there is no moment with a route and no rules.
        loaded = subprocess.run(
            [self.nsenter, f"--net=/proc/{pid}/ns/net", "--", self.nft, "-f", "-"],
            input=ruleset(self.allowed_cidrs).encode(),
            capture_output=True,
            timeout=SETUP_TIMEOUT_SECONDS,
            env={},
            check=False,
        )
        if loaded.returncode != 0:
            raise NetworkUnavailable(f"cannot load the egress filter: {loaded.stderr.decode(errors='replace')[:300]}")
        ready_r, ready_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [
                    self.slirp,
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    "--enable-sandbox",
                    "--enable-seccomp",
                    f"--ready-fd={ready_w}",
                    str(pid),
                    "tap0",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(ready_w,),
                env={},
                start_new_session=True,
            )
        finally:
            os.close(ready_w)
        try:
            ready = _read_with_timeout(ready_r, SETUP_TIMEOUT_SECONDS)
        finally:
            os.close(ready_r)
        if ready != b"1":
            proc.kill()
            _, err = proc.communicate(timeout=5)
            raise NetworkUnavailable(f"slirp4netns did not come up: {err.decode(errors='replace')[-300:]}")
        return proc


def _read_with_timeout(fd: int, seconds: float) -> bytes:
    readable, _, _ = select.select([fd], [], [], seconds)
    if not readable:
        return b""
    return os.read(fd, 1)
