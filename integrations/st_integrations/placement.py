"""Running each read task on the node of its peer, in Ray and in Dask
(paper 2: "moving the computation to the data"; docs/decisions.md, "Task
placement in the engines"), through the engines' public APIs: which Ray node
stands for a peer, the remote arguments that pin a task there, the values of
``placement=`` and the error when a peer's host has no node.

The hooks into the engines' private internals (the Ray read operator's
per-task remote arguments, the Dask scheduler plugin), their table of tested
versions and their fallbacks are in :mod:`st_integrations.engine_compat`.

Ray Data 2.60 has no per-read-task placement: one read operator gives all
its tasks the same remote arguments. Two ways were measured
(``read_storetorrent(placement=...)``):

* ``"task"`` (what ``"auto"``, the default, chooses on a tested Ray): one
  read operator whose tasks are each pinned by the engine_compat hook to
  the node of their peer (``label_selector={"ray.io/node-id": ...}``). Maps
  after the read fuse into the read task.
* ``"node"`` (public API only; what ``"auto"`` falls back to, with a
  warning, on another Ray version): one read operator per node, pinned
  with ``label_selector``, then ``union``. Maps after the union run in
  separate tasks.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from st_py.client.getlocal import local_addresses
from st_py.errors import InvalidOptionError, StoreTorrentError
from st_py.wire.transport import split_addr

Placement = Literal["auto", "task", "node"]
"""The values of the Ray reader's ``placement=``."""
PLACEMENTS: tuple[str, ...] = get_args(Placement)


def check_placement(placement: object) -> Placement:
    """``placement`` if it is one of :data:`PLACEMENTS`.

    Raises
    ------
    InvalidOptionError
        (a ``ValueError``) for any other value, naming the allowed ones.
    """
    if placement not in PLACEMENTS:
        raise InvalidOptionError(
            f"placement={placement!r} is not one of {', '.join(repr(p) for p in PLACEMENTS)}",
            "placement",
            placement,
        )
    return placement  # type: ignore[return-value]


class PlacementError(StoreTorrentError):
    """No engine node or worker runs on the host of ``peer``, or the
    placement asked for cannot be had on this engine (``placement="task"``
    on a Ray that :mod:`st_integrations.engine_compat` was not tested with;
    ``peer`` is "" then)."""

    def __init__(self, message: str, peer: str = ""):
        super().__init__(message)
        self.peer = peer


# -- Ray ----------------------------------------------------------------------
def peer_resource(addr: str) -> str:
    """The Ray custom resource that marks the node of the peer at ``addr``
    (``st-peer-HOST-PORT``): how several Ray nodes on one machine stand for
    several hosts."""
    return "st-peer-" + addr.replace(":", "-")


def resource_peer(resource: str) -> str | None:
    """The peer address of a :func:`peer_resource` name, else None."""
    if not resource.startswith("st-peer-"):
        return None
    host, _, port = resource[len("st-peer-") :].rpartition("-")
    return f"{host}:{port}" if host and port.isdigit() else None


def ray_node_of_peers(peers: list[str]) -> dict[str, str]:
    """``{peer: Ray node id}``: the node with the peer's resource, else the
    node whose IP is the peer's host, else (a peer on loopback) a node of
    this machine.

    Raises
    ------
    PlacementError
        If no Ray node runs on a peer's host.
    """
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    local = local_addresses()
    out: dict[str, str] = {}
    for addr in peers:
        res = peer_resource(addr)
        match = [n for n in nodes if res in n.get("Resources", {})]
        if not match:
            host, _ = split_addr(addr)
            match = [n for n in nodes if n["NodeManagerAddress"] == host]
            if not match and (host.startswith("127.") or host in local):
                match = [
                    n for n in nodes if n["NodeManagerAddress"] in local or n["NodeManagerAddress"].startswith("127.")
                ] or nodes[:1]
        if not match:
            raise PlacementError(
                f"no Ray node runs on the host of peer {addr}: start a Ray node there, or "
                f"give one the resource {res!r}",
                peer=addr,
            )
        out[addr] = match[0]["NodeID"]
    return out


def ray_pin_args(node_id: str) -> dict[str, Any]:
    """The remote arguments that pin a Ray task (or every task of a read
    operator) to the node ``node_id``: public API."""
    return {"label_selector": {"ray.io/node-id": node_id}}
