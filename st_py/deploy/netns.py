"""Network namespaces for a local cluster whose peers are separate hosts as
far as the network goes (issue 14; docs/deployment.md, "A local cluster"):
peer i runs in namespace ``<prefix>-<i>``, joined to this machine by a veth
pair with a /30 of its own (this side ``10.<o>.<i>.1``, the peer's side
``10.<o>.<i>.2``). Taking the link down is a real network failure: packets
vanish, connections time out; nothing is refused.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ``ip`` tool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

FORWARD = "/proc/sys/net/ipv4/ip_forward"  # turned on while namespaces exist: peer to peer traffic


class NetnsError(RuntimeError):
    """Namespaces cannot be made here (not root, no ``ip``)."""


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip tool (iproute2) is missing"
    return None


# sh -c body of hidden_argv: an empty tmpfs over each folder up to "--", then exec the command
_HIDE = 'while [ "$1" != -- ]; do mount -t tmpfs -o mode=0755 none "$1" || exit 97; shift; done; shift; exec "$@"'


def hidden_argv(hidden: Sequence[str | os.PathLike], argv: Sequence[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own (``unshare -m``, private
    propagation) in which each folder of ``hidden`` (each must exist) is an
    empty tmpfs: the process and its children see none of their files,
    every other process still does. The mounts go when the namespace's
    last process exits. The command is exec'd: its pid is the one started.
    It exits 97 if a mount fails (needs root)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", _HIDE, "sh", *map(str, hidden), "--", *argv]


class NetNamespaces:
    """The network namespaces of one local cluster's peers (``<prefix>-<i>``,
    default prefix ``st<pid>``), made on first use by :meth:`namespace` and
    removed by :meth:`destroy`, which also puts ``ip_forward`` back.

    Not thread-safe: owned by one :class:`~st_py.deploy.cluster.LocalCluster`."""

    def __init__(self, prefix: str | None = None):
        tag = os.getpid() % 100_000
        self.prefix = prefix or f"st{tag}"
        self.octet = 100 + tag % 100  # 10.<octet>.<i>.0/30: one block per process
        self.made: dict[int, tuple[str, str]] = {}  # i -> (namespace, host-side veth)
        self._forwarding: str | None = None  # ip_forward before we turned it on

    @staticmethod
    def _ip(*args: str) -> None:
        r = subprocess.run(["ip", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise NetnsError(f"ip {' '.join(args)}: {r.stderr.strip()}")

    def host_ip(self, i: int) -> str:
        """This machine's address on peer ``i``'s link (``10.<o>.<i>.1``)."""
        return f"10.{self.octet}.{i}.1"

    def peer_ip(self, i: int) -> str:
        """Peer ``i``'s address in its namespace (``10.<o>.<i>.2``)."""
        return f"10.{self.octet}.{i}.2"

    def namespace(self, i: int) -> str:
        """The namespace of peer ``i``, made (with its link up) on first use."""
        if i in self.made:
            return self.made[i][0]
        if why := available():
            raise NetnsError(why)
        ns, veth = f"{self.prefix}-{i}", f"{self.prefix}v{i}"
        self._ip("netns", "add", ns)
        self.made[i] = (ns, veth)
        self._ip("link", "add", veth, "type", "veth", "peer", "name", veth + "p")
        self._ip("link", "set", veth + "p", "netns", ns)
        self._ip("addr", "add", self.host_ip(i) + "/30", "dev", veth)
        self._ip("link", "set", veth, "up")
        self._ip("netns", "exec", ns, "ip", "addr", "add", self.peer_ip(i) + "/30", "dev", veth + "p")
        self._ip("netns", "exec", ns, "ip", "link", "set", veth + "p", "up")
        self._ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        # the other peers' namespaces, through this machine
        self._ip("netns", "exec", ns, "ip", "route", "add", "default", "via", self.host_ip(i))
        if self._forwarding is None:
            with open(FORWARD) as f:
                self._forwarding = f.read().strip()
            with open(FORWARD, "w") as f:
                f.write("1")
        return ns

    def link(self, i: int, up: bool) -> None:
        """Take peer ``i``'s link down (a host gone from the network) or up.
        The peer's end goes down: this machine keeps its route, so packets
        to the peer are dropped on the dead link (no ICMP, no refusal)."""
        ns, veth = self.made[i]
        self._ip("netns", "exec", ns, "ip", "link", "set", veth + "p", "up" if up else "down")
        if up:  # the default route left with the link
            subprocess.run(
                ["ip", "netns", "exec", ns, "ip", "route", "replace", "default", "via", self.host_ip(i)],
                capture_output=True,
            )

    def destroy(self) -> None:
        """Remove every namespace made (their veth pairs go with them)."""
        for ns, _ in self.made.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made.clear()
        if self._forwarding is not None:
            with open(FORWARD, "w") as f:
                f.write(self._forwarding)
            self._forwarding = None
