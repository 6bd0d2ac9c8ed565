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


SLOTS = 4  # sets of namespaces one process may hold at once (clusters alive together)
SLOT_PEERS = 256 // SLOTS  # peers a set may have: 10.<o>.<slot * SLOT_PEERS + i>.0/30
_slots_taken: dict[int, object] = {}  # slot -> the live NetNamespaces of this process holding it
_forwarding: list[str] = []  # ip_forward before this process turned it on, while a set has namespaces


class NetNamespaces:
    """The network namespaces of one local cluster's peers (``<prefix>-<i>``,
    default prefix ``st<pid>``, ``st<pid>s<slot>`` for the second set alive
    in this process and after), made on first use by :meth:`namespace` and
    removed by :meth:`destroy`, which also puts ``ip_forward`` back and
    frees the set's slot: up to :data:`SLOTS` sets of one process live
    together (two private-hosts clusters of one test run, say), each with
    its names and its addresses, of at most :data:`SLOT_PEERS` peers.

    Raises :class:`NetnsError` when :data:`SLOTS` sets are alive already.
    Not thread-safe: owned by one :class:`~st_py.deploy.cluster.LocalCluster`."""

    def __init__(self, prefix: str | None = None):
        free = [n for n in range(SLOTS) if n not in _slots_taken]
        if not free:
            raise NetnsError(f"{SLOTS} sets of network namespaces are alive in this process: destroy one first")
        self.slot = free[0]
        _slots_taken[self.slot] = self
        tag = os.getpid() % 100_000
        self.prefix = prefix or (f"st{tag}" if self.slot == 0 else f"st{tag}s{self.slot}")
        self.octet = 100 + tag % 100  # 10.<octet>.<third>.0/30: one block per process, a quarter per slot
        self.made: dict[int, tuple[str, str]] = {}  # i -> (namespace, host-side veth)

    def _third(self, i: int) -> int:
        if not 0 <= i < SLOT_PEERS:
            raise NetnsError(f"peer {i}: a set of network namespaces holds at most {SLOT_PEERS} peers")
        return self.slot * SLOT_PEERS + i

    @staticmethod
    def _ip(*args: str) -> None:
        r = subprocess.run(["ip", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise NetnsError(f"ip {' '.join(args)}: {r.stderr.strip()}")

    def host_ip(self, i: int) -> str:
        """This machine's address on peer ``i``'s link (``10.<o>.<i>.1`` in
        the first slot; ``<i>`` offset by :data:`SLOT_PEERS` per slot)."""
        return f"10.{self.octet}.{self._third(i)}.1"

    def peer_ip(self, i: int) -> str:
        """Peer ``i``'s address in its namespace (``10.<o>.<i>.2``, offset
        as :meth:`host_ip`)."""
        return f"10.{self.octet}.{self._third(i)}.2"

    def namespace(self, i: int) -> str:
        """The namespace of peer ``i``, made (with its link up) on first use."""
        if i in self.made:
            return self.made[i][0]
        if why := available():
            raise NetnsError(why)
        if _slots_taken.setdefault(self.slot, self) is not self:  # destroyed, and its slot taken since
            raise NetnsError(f"slot {self.slot} of this set was taken by another after destroy(): make a new set")
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
        if not _forwarding:  # the first namespace of this process's sets
            with open(FORWARD) as f:
                _forwarding.append(f.read().strip())
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
        if _slots_taken.get(self.slot) is self:
            del _slots_taken[self.slot]
        if _forwarding and not _slots_taken:  # the last set of this process: as it was before
            with open(FORWARD, "w") as f:
                f.write(_forwarding.pop())
