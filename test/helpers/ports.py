"""Local ports: a free TCP or UDP port on 127.0.0.1, and which addresses listen on a TCP port."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_port() -> int:
    """A UDP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> set[str]:
    """The IPv4 addresses (dotted) listening on TCP ``port``, from /proc/net/tcp."""
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host, hexport = local.split(":")
        if state == "0A" and int(hexport, 16) == port:
            found.add(".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found
