"""Ports a local cluster (:class:`~st_py.deploy.cluster.LocalCluster`:
``storetorrent up``, the demo, the tests) gives its daemons.

Such a cluster starts each daemon on a port it chose and asks for the same
one at every restart (of the daemon by the supervisor or a test; one that
keeps its layout, ``up``, remembers them in ``layout.json`` for its next
run too). A port picked by the kernel (port 0) is
an *ephemeral* port: the kernel hands out the same range to every port-0
bind and outgoing connection on the machine, so while a daemon is down
(restarting) any of them can take its port (one of our own peers'
metrics port, a client's connection, a test's port-0 bind), and the
daemon cannot come back on it. The ports chosen here are below the
ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), which the
kernel never hands out by itself, distinct from each other and free when
chosen. docs/deployment.md, "A local cluster"; docs/decisions.md.
"""

from __future__ import annotations

import errno
import random
import socket

LOWEST = 10000  # below: well-known and registered services more often listen
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default


def ephemeral_range(path: str = _RANGE_FILE) -> tuple[int, int]:
    """``(first, last)`` port the kernel hands out for port 0 and outgoing
    connections (Linux's default when ``path`` cannot be read)."""
    try:
        with open(path) as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a socket listens on (or is bound to) ``host:port`` now: a bind
    with SO_REUSEADDR, as every daemon of ours binds, fails with
    EADDRINUSE. Any other failure (no such address) counts as not in use."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def _usable() -> range:
    """The ports to choose from: ``LOWEST`` up to the ephemeral range, or
    above it when it starts too low to leave room (a tuned machine)."""
    lo, hi = ephemeral_range()
    if lo - LOWEST >= 1000:
        return range(LOWEST, lo)
    return range(hi + 1, 65536) if hi < 64535 else range(1024, lo)


def choose_ports(
    sizes: list[int], taken: set[int] | frozenset[int] = frozenset(), host: str = "127.0.0.1"
) -> list[int]:
    """For each entry of ``sizes``, the first port of a run of that many
    consecutive ports (a tracker with per-file trackers takes its port + 1
    onwards), all free on ``host`` now, outside the ephemeral range, none
    in ``taken`` nor in another run. Random, so two clusters starting at
    once rarely choose alike; a port taken after it was chosen makes the
    daemon's start fail, and the caller chooses again.

    Raises
    ------
    OSError
        No free run found (after 2,000 tries for a run).
    """
    pool = _usable()
    used = set(taken)
    out = []
    for size in sizes:
        for _ in range(2000):
            first = random.randrange(pool.start, pool.stop - size + 1)
            run = range(first, first + size)
            if not used.intersection(run) and not any(port_in_use(p, host) for p in run):
                used.update(run)
                out.append(first)
                break
        else:
            raise OSError(errno.EADDRINUSE, f"no {size} free consecutive ports in {pool.start}-{pool.stop - 1}")
    return out
