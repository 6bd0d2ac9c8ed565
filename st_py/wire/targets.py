"""What a tracker address names (docs/deployment.md, "The metadata log in
etcd"): one ``host:port``, or several separated by commas (a leader and its
standbys; only the elected one listens), which gRPC dials as one channel
that connects to whichever answers (its ``ipv4:`` target, ``pick_first``)."""

from __future__ import annotations

import socket


def addresses(address: str) -> list[str]:
    """The ``host:port`` addresses in ``address`` (comma-separated)."""
    return [a.strip() for a in address.split(",") if a.strip()]


def grpc_target(address: str) -> str:
    """The gRPC target for ``address``: itself for one address; for
    several, ``ipv4:IP:PORT,IP:PORT,...`` with each host resolved (gRPC's
    multi-address targets take IP addresses only).

    Raises
    ------
    ValueError
        A host of several that does not resolve to an IPv4 address.
    """
    parts = addresses(address)
    if len(parts) <= 1 or address.strip().startswith(("ipv4:", "ipv6:", "dns:", "unix:")):
        return address.strip()
    out = []
    for a in parts:
        host, _, port = a.rpartition(":")
        try:
            ip = socket.gethostbyname(host.strip("[]") or "localhost")
        except OSError as e:
            raise ValueError(f"tracker address {a!r} of {address!r}: {host} does not resolve ({e})") from None
        out.append(f"{ip}:{port}")
    return "ipv4:" + ",".join(out)
