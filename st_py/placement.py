"""Record placement (paper 3.1, 4.2): which peers hold the copies of a record.

Each file has a placement policy, chosen at create (docs/replication.md,
"Placement policies"):

``random`` (the paper's): each block of ``blocksize`` consecutive records gets
F distinct peers drawn uniformly at random from the file's usable peers, copy
rank r going to the r-th peer drawn.

``hash`` (BLAST, seed 002): the holders of a record are the F usable peers
of highest rendezvous weight for (file id, record name), so anyone can find a
record's copies from its name and the peerlist, without the infofile
(:func:`hash_ranking`). The unit is the record: ``blocksize`` does not apply.

``local-first`` (FreeLoader's asymmetric placement, seed 004 section 4.1):
copy rank 0 on the writer's own node, the other copies at random elsewhere.

A copy that fails moves to a usable peer that holds no copy of the record yet
(paper 4.3), so the F copies always sit on F distinct peers (invariant 3,
paper 3.7).

The client (:mod:`st_py.file`), rebalance (:mod:`st_py.rebalance`) and the
data-loss analysis (:mod:`st_tools.dataloss`) all call these functions, so
the analysis measures the placement that is really used. They are pure: no
I/O, no clock.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Collection, Mapping, Sequence

DEFAULT_BLOCKSIZE = 16  # consecutive records on the same holders when a file does not say


def choose_holders(usable: Sequence[int], copies: int, rng: random.Random | None = None) -> list[int]:
    """F distinct peers for a block of records, in copy-rank order.

    Parameters
    ----------
    usable : peer indexes that are alive and not known to have failed
    copies : F, the number of copies of the replication class
    rng : random source (default: the module's shared one)

    Raises
    ------
    ValueError
        If fewer than ``copies`` peers are usable (callers turn this into
        :class:`~st_py.errors.NotEnoughPeersError` with context).
    """
    if len(usable) < copies:
        raise ValueError(f"{copies} copies need {copies} usable peers, {len(usable)} given")
    return (rng or random).sample(list(usable), copies)


def choose_spare(usable: Sequence[int], holders: Sequence[int], rng: random.Random | None = None) -> int | None:
    """A usable peer holding no copy of the record, to take over a failed
    copy (paper 4.3, 4.4), or None if there is none."""
    spare = [i for i in usable if i not in holders]
    return (rng or random).choice(spare) if spare else None


# Placement policies, chosen per file at create (docs/replication.md):
#   random       F distinct peers drawn at random per block (above)
#   hash         rendezvous hashing of (file id, record name) over the peerlist
#                (BLAST): a client finds a record's holders without the infofile
#   local-first  rank 0 on the writer's own node, the others elsewhere
#                (FreeLoader, seed 004 section 4.1)
POLICIES = ("random", "hash", "local-first")
DEFAULT_POLICY = "random"


def check_policy(policy: str) -> str:
    """The policy name (``""`` means the default).

    Raises
    ------
    ~st_py.errors.BadNameError
        For a name not in :data:`POLICIES`.
    """
    from .errors import BadNameError

    policy = policy or DEFAULT_POLICY
    if policy not in POLICIES:
        raise BadNameError(f"unknown placement policy {policy!r}: use one of {', '.join(POLICIES)}")
    return policy


# -- hash placement: rendezvous (highest-random-weight) hashing -----------------

@functools.lru_cache(maxsize=4096)
def _peer_hasher(file_id: int, peer_id: str) -> hashlib.blake2b:
    """BLAKE2b already fed with (file id, peer id): one copy per name."""
    return hashlib.blake2b(file_id.to_bytes(8, "little") + peer_id.encode("utf-8") + b"\0", digest_size=8)


def hash_weight(file_id: int, name: str, peer_id: str) -> int:
    """The rendezvous weight of peer ``peer_id`` for record ``name`` of file
    ``file_id``: the first 8 bytes of BLAKE2b(file id, peer id, name) as an
    unsigned integer. The peer's id, not its address or peerlist index, so a
    peer keeps its weights when it moves or the peerlist grows."""
    h = _peer_hasher(file_id, peer_id).copy()
    h.update(name.encode("utf-8", "surrogateescape"))
    return int.from_bytes(h.digest(), "little")


def hash_ranking(file_id: int, name: str, peer_ids: Mapping[int, str]) -> list[int]:
    """Every peer index of the peerlist ``{peer_idx: peer_id}``, highest
    rendezvous weight for record ``name`` first (ties, which need equal
    64-bit hashes, by index). With every peer usable, copy rank r of the
    record is on the r-th peer of this list; a peer that was not usable when
    the record was written is skipped, which moves the following ranks one
    place down the list, so a reader that has only the name tries this list
    in order (:meth:`st_py.reader.ReaderMixin.queue_get`)."""
    return sorted(peer_ids, key=lambda i: (-hash_weight(file_id, name, peer_ids[i]), i))


def hash_holders(file_id: int, name: str, peer_ids: Mapping[int, str], copies: int,
                 usable: Collection[int] | None = None) -> list[int]:
    """The F holders of record ``name`` under hash placement, in copy-rank
    order: the first ``copies`` peers of :func:`hash_ranking` that are in
    ``usable`` (default: all).

    Raises
    ------
    ValueError
        If fewer than ``copies`` peers are usable.
    """
    ranked = hash_ranking(file_id, name, peer_ids)
    if usable is not None:
        ranked = [i for i in ranked if i in usable]
    if len(ranked) < copies:
        raise ValueError(f"{copies} copies need {copies} usable peers, {len(ranked)} given")
    return ranked[:copies]


def hash_spare(file_id: int, name: str, peer_ids: Mapping[int, str], usable: Collection[int],
               holders: Collection[int]) -> int | None:
    """:func:`choose_spare` under hash placement: the usable peer holding no
    copy of record ``name`` that comes first in its ranking, where a reader
    without the infofile looks first; None if there is none."""
    return next((i for i in hash_ranking(file_id, name, peer_ids) if i in usable and i not in holders), None)


# -- local-first placement ---------------------------------------------------------

def pick_local_peer(addrs: Mapping[int, str], usable: Collection[int], local_hosts: Collection[str],
                    prefer: str | None = None, rng: random.Random | None = None) -> int | None:
    """The peer of the writer's own node: the usable peer at address
    ``prefer`` (``host:port``) when given, else one usable peer whose host
    is in ``local_hosts``, drawn at random (callers keep it for the whole
    write, so one writer's rank-0 copies land on one peer). None if there is
    none.

    Parameters
    ----------
    addrs : ``{peer_idx: "host:port"}`` of the peerlist
    usable : peer indexes that are alive and not known to have failed
    local_hosts : this machine's addresses (:func:`st_py.getlocal.local_addresses`)
    """
    if prefer is not None:
        mine = [i for i in sorted(addrs) if addrs[i] == prefer and i in usable]
        if mine:
            return mine[0]
    local = [i for i in sorted(addrs) if i in usable and addrs[i].rsplit(":", 1)[0].strip("[]") in local_hosts]
    return (rng or random).choice(local) if local else None


def local_first_holders(usable: Sequence[int], copies: int, local: int | None,
                        rng: random.Random | None = None) -> list[int]:
    """F distinct peers with copy rank 0 on ``local`` (the writer's node)
    and the others drawn at random from the rest; plain random placement
    when ``local`` is None or not usable.

    Raises
    ------
    ValueError
        If fewer than ``copies`` peers are usable.
    """
    if local is None or local not in usable or len(usable) < copies:
        return choose_holders(usable, copies, rng)
    return [local] + choose_holders([i for i in usable if i != local], copies - 1, rng)
