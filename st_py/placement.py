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

The stripes of an object (docs/striping.md) go round-robin over a random
order of the peers (:func:`stripe_holders`); under local-first, asymmetric
striping puts copy rank 0 of a share of them on the writer's node.

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
from fractions import Fraction

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


# -- striped objects: round-robin and asymmetric striping -----------------------------

def is_local_stripe(index: int, local_share: float) -> bool:
    """Whether stripe ``index`` is one of the writer's under asymmetric
    striping with ``local_share`` (0..1) of the stripes local: the local
    stripes spread evenly among the others (FreeLoader, seed 004 section
    4.1: "the local morsels are distributed uniformly with remote
    morsels"), stripe i local when floor((i+1) s) > floor(i s). With 1 every
    stripe is, with 0 none. The share is taken as the nearest fraction of
    denominator at most 1,000 (3/11 exactly: 30 of every 110 stripes)."""
    f = _share_fraction(local_share)
    return (index + 1) * f.numerator // f.denominator > index * f.numerator // f.denominator


@functools.lru_cache(maxsize=64)
def _share_fraction(local_share: float) -> Fraction:
    return Fraction(local_share).limit_denominator(1000)


def stripe_holders(index: int, copies: int, ring: Sequence[int], width: int, local: int | None = None,
                   local_share: float = 1.0) -> list[int]:
    """The F holders of stripe ``index`` of an object, in copy-rank order
    (docs/striping.md). Pure: the same arguments place the same way.

    Round-robin (``local`` None, seed 004 section 3.2): copy rank 0 on
    ``ring[index % width]``, the other ranks on the peers after it in
    ``ring``, so consecutive stripes start on different peers.

    Asymmetric (``local`` the writer's peer, ``ring`` the other peers;
    seed 004 section 4.1): a local stripe (:func:`is_local_stripe`) has copy
    rank 0 on ``local`` and its other ranks round-robin over ``ring`` as
    ranks 0.. would be; the other stripes are placed round-robin over
    ``ring`` alone, with ``local`` taking the last rank when ``ring`` has
    fewer than F peers.

    Parameters
    ----------
    index : stripe index, from 0
    copies : F
    ring : peer indexes in the object's order (a random permutation, drawn
        once per object); without ``local`` every usable peer, with it every
        usable peer but ``local``
    width : the stripe width, 1..len(ring): rank 0 (round-robin) or the
        first remote rank (asymmetric) rotates over the first ``width``
        peers of ``ring``
    local : the writer's peer, or None
    local_share : the fraction of stripes whose rank 0 is on ``local``

    Raises
    ------
    ValueError
        If ``ring`` (with ``local``) holds fewer than F peers.
    """
    n = len(ring)
    if n + (local is not None) < copies:
        raise ValueError(f"{copies} copies need {copies} peers, {n + (local is not None)} given")
    first = index % max(1, min(width, n)) if n else 0
    if local is None:
        return [ring[(first + k) % n] for k in range(copies)]
    if is_local_stripe(index, local_share):
        return [local] + [ring[(first + k) % n] for k in range(copies - 1)]
    remote = [ring[(first + k) % n] for k in range(min(copies, n))]
    return remote + [local] * (copies - len(remote))


def fit_local_share(local_share: float, size: int | None, free_bytes: int | None) -> float:
    """The local share, lowered so the writer's peer keeps a tenth of its
    free space (FreeLoader's two-phase choice of the local:remote ratio,
    seed 004 section 4.1: "check whether the host client has enough donated
    space ... and adjust the ratio if there is not"). ``size`` is the
    object's (None: not known in advance, the share is kept), ``free_bytes``
    what the peer last announced (None: not known, the share is kept). A
    copy the peer refuses anyway (``NO_SPACE``) fails over to another peer."""
    if size is None or size <= 0 or free_bytes is None:
        return local_share
    return max(0.0, min(local_share, 0.9 * free_bytes / size))
