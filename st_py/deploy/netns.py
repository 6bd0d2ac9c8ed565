"""Network namespaces for a local cluster whose peers are separate hosts as
far as the network goes (issue 14; docs/deployment.md, "A local cluster"):
peer i runs in namespace ``<prefix>-<i>``, joined to this machine by a veth
pair with a /30 of its own (this side ``10.<o>.<i>.1``, the peer's side
``10.<o>.<i>.2``). Taking the link down is a real network failure: packets
vanish, connections time out; nothing is refused.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ``ip`` tool.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

FORWARD = "/proc/sys/net/ipv4/ip_forward"  # turned on while namespaces exist: peer to peer traffic
# The processes of this machine holding namespaces, one file each (``<pid>``: its address
# block), and ``ip_forward`` as it was before the first of them (``forward``); changed under
# an exclusive lock of ``lock``, so that clusters of several processes (two test runs, two
# users' local clusters) neither share addresses nor turn forwarding off under each other.
REGISTRY = Path("/run/storetorrent-netns")
BLOCKS = range(100, 200)  # the second octet of a process's 10.<o>.0.0/16


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
_block: list[int] = []  # this process's address block (REGISTRY), while a set of it has namespaces


@contextlib.contextmanager
def _registry() -> Iterator[Path]:
    """:data:`REGISTRY`, locked (``flock``) for the block: one process at a time."""
    REGISTRY.mkdir(mode=0o700, exist_ok=True)
    with open(REGISTRY / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield REGISTRY
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holders(reg: Path) -> dict[int, int]:
    """``{pid: block}`` of the live processes holding namespaces; the files of
    dead ones removed (their namespaces and links too: a crashed process's)."""
    out = {}
    for f in reg.iterdir():
        if not f.name.isdigit():
            continue
        try:
            block = int(f.read_text())
        except (OSError, ValueError):
            block = -1
        if _alive(int(f.name)):
            out[int(f.name)] = block
        else:
            _remove_leftovers(f"st{block}")
            f.unlink(missing_ok=True)
    return out


def _remove_leftovers(prefix: str) -> None:
    """Delete the namespaces and host-side links named for ``prefix`` that a
    process which died holding them left (best effort)."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for name in ns:
        if name.startswith((prefix + "-", prefix + "s")):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    for line in links:
        name = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        if name.startswith((prefix + "v", prefix + "s")):
            subprocess.run(["ip", "link", "del", name], capture_output=True)


def _take_block() -> int:
    """This process's address block: the lowest of :data:`BLOCKS` no live
    process holds, recorded in :data:`REGISTRY`; ``ip_forward`` turned on
    (and its value kept) if no other process holds one."""
    if _block:
        return _block[0]
    with _registry() as reg:
        held = _holders(reg)
        free = [b for b in BLOCKS if b not in held.values()]
        if not free:
            raise NetnsError(f"{len(BLOCKS)} processes of this machine hold network namespaces already")
        if not held:  # the first: forwarding as it was, to put back when the last one leaves
            (reg / "forward").write_text(Path(FORWARD).read_text().strip())
            Path(FORWARD).write_text("1")
        (reg / str(os.getpid())).write_text(str(free[0]))
    _block.append(free[0])
    return free[0]


def _give_block_back() -> None:
    """Forget this process's block; the last process holding one puts
    ``ip_forward`` back as it was."""
    if not _block:
        return
    _block.clear()
    with _registry() as reg:
        (reg / str(os.getpid())).unlink(missing_ok=True)
        if not _holders(reg):
            saved = reg / "forward"
            if saved.exists():
                Path(FORWARD).write_text(saved.read_text().strip() or "0")
                saved.unlink()


class NetNamespaces:
    """The network namespaces of one local cluster's peers (``<prefix>-<i>``,
    default prefix ``st<octet>``, ``st<octet>s<slot>`` for the second set
    alive in this process and after), made on first use by :meth:`namespace`
    and removed by :meth:`destroy`, which also frees the set's slot: up to
    :data:`SLOTS` sets of one process live together (two private-hosts
    clusters of one test run, say), each with its names and its addresses,
    of at most :data:`SLOT_PEERS` peers. A process's addresses are a block
    no other live process of the machine holds, and ``ip_forward`` is on
    while any holds one, then put back (:data:`REGISTRY`).

    Raises :class:`NetnsError` when :data:`SLOTS` sets are alive already.
    Not thread-safe: owned by one :class:`~st_py.deploy.cluster.LocalCluster`."""

    def __init__(self, prefix: str | None = None):
        free = [n for n in range(SLOTS) if n not in _slots_taken]
        if not free:
            raise NetnsError(f"{SLOTS} sets of network namespaces are alive in this process: destroy one first")
        self.slot = free[0]
        _slots_taken[self.slot] = self
        self._prefix = prefix
        self._octet: int | None = None
        self.made: dict[int, tuple[str, str]] = {}  # i -> (namespace, host-side veth)

    @property
    def octet(self) -> int:
        """The second octet of this process's addresses (10.<octet>.<third>.0/30:
        a block of its own among the machine's processes, a quarter per
        slot), taken on first use (:data:`REGISTRY`).

        Raises :class:`NetnsError` where namespaces cannot be made."""
        if self._octet is None:
            if why := available():
                raise NetnsError(why)
            self._octet = _take_block()
        return self._octet

    @property
    def prefix(self) -> str:
        """The names' prefix: ``st<octet>``, ``st<octet>s<slot>`` for a set
        after the first, unless given."""
        if self._prefix is None:
            self._prefix = f"st{self.octet}" if self.slot == 0 else f"st{self.octet}s{self.slot}"
        return self._prefix

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
        # the other peers' namespaces, through this machine (ip_forward on while a block is held)
        self._ip("netns", "exec", ns, "ip", "route", "add", "default", "via", self.host_ip(i))
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
        """Remove every namespace made and its veth pair (deleted by its
        host side too: a namespace that a process still in it keeps alive
        must not keep the link's name); the last set of this process gives
        its address block back (:data:`REGISTRY`)."""
        for ns, veth in self.made.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        self.made.clear()
        if _slots_taken.get(self.slot) is self:
            del _slots_taken[self.slot]
        if not _slots_taken:  # the last set of this process
            _give_block_back()
