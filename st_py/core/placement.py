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

**Failure domains** (docs/replication.md, "Failure domains"). Each peer has a
domain, a path ``site/rack/host`` coarsest first (``st-peer --domain``; by
default the host of its address, so peers on one machine share one). Every
policy above places the copies of a record *as far apart as the usable
peers allow*: each next copy goes to the first peer in the policy's order
(a random permutation, the record's rendezvous ranking, the stripe ring)
whose domain shares the shortest path prefix with the copies already placed
(:func:`spread_holders`). So the copies are on distinct sites when there
are F sites, else on distinct racks when there are F racks, else on distinct
hosts (domains), else only on distinct peers; a placement of the last kind
is reported by the caller (:func:`shares_domain`), never silent.

The client (:mod:`st_py.client.file`), rebalance (:mod:`st_py.maintenance.rebalance`) and the
data-loss analysis (:mod:`st_tools.dataloss`) all call these functions, so
the analysis measures the placement that is really used. They are pure: no
I/O, no clock.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

DEFAULT_BLOCKSIZE = 16  # consecutive records on the same holders when a file does not say

Domain = tuple[str, ...]  # a failure domain's path, coarsest first: ("site", "rack", "host")
MAX_DOMAIN = 255  # bytes of a domain as declared (st-peer --domain)


# -- failure domains ----------------------------------------------------------------


def host_of(addr: str) -> str:
    """The host of ``host:port`` (``[v6]:port`` too), without brackets."""
    return addr.rsplit(":", 1)[0].strip("[]") if ":" in addr else addr


def normalize_domain(domain: str) -> str:
    """A declared domain as placement reads it: at most ``MAX_DOMAIN``
    bytes, empty path components dropped (``"/a//b/"`` -> ``"a/b"``; ``""``
    stays: no domain declared)."""
    return "/".join(c for c in domain[:MAX_DOMAIN].split("/") if c)


def peer_domain(domain: str, addr: str) -> Domain:
    """A peer's failure domain as path components, coarsest first.

    Parameters
    ----------
    domain : str
        What the peer declared (``st-peer --domain site/rack/host``; at most
        ``MAX_DOMAIN`` bytes are used); empty components are dropped.
    addr : str
        Its ``host:port``: when it declared nothing, its domain is its host
        (one component), so peers on one machine share a domain.

    Returns
    -------
    tuple of str
        At least one component (``("?",)`` for an empty address).
    """
    parts = tuple(c for c in domain[:MAX_DOMAIN].split("/") if c)
    return parts or (host_of(addr) or "?",)


def domain_text(domain: Domain) -> str:
    """``("site", "rack", "host")`` as ``"site/rack/host"``."""
    return "/".join(domain)


def domain_count(peers: Iterable[int], domains: Mapping[int, Domain] | None) -> int:
    """How many distinct failure domains ``peers`` span (each peer its own
    when ``domains`` is None)."""
    peers = list(peers)
    return len({domains[i] for i in peers}) if domains is not None else len(set(peers))


def _closeness(a: Domain, b: Domain) -> tuple[bool, int]:
    """How close two peers' domains are: (same domain, length of the common
    path prefix). Tuples compare: a shared site beats a shared rack beats a
    shared host."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return (a == b, n)


_APART = (False, 0)  # nothing in common: the best a candidate can be


def _nearness(cand: int, placed: Sequence[int], domains: Mapping[int, Domain]) -> tuple[bool, int]:
    """The closeness of ``cand`` to the nearest of ``placed``."""
    d = domains[cand]
    return max((_closeness(d, domains[p]) for p in placed), default=_APART)


def nearness(cand: int, placed: Sequence[int], domains: Mapping[int, Domain] | None) -> tuple[bool, int]:
    """How close peer ``cand``'s failure domain is to the nearest of
    ``placed`` (the other holders of a record): ``(same domain, length of
    the common path prefix)``, so that comparing two results, the smaller
    is farther apart; ``(False, 0)`` without ``domains`` or ``placed``."""
    return _nearness(cand, placed, domains) if domains is not None else _APART


def farthest(cands: Iterable[int], placed: Sequence[int], domains: Mapping[int, Domain] | None) -> list[int]:
    """The peers of ``cands`` (in their order) whose failure domains are
    farthest from those of ``placed``: where a copy of a record may go and
    keep the record's copies apart (all of ``cands`` without ``domains``)."""
    cands = list(cands)
    if domains is None or not cands:
        return cands
    near = [_nearness(i, placed, domains) for i in cands]
    best = min(near)
    return [i for i, n in zip(cands, near) if n == best]


def spread_holders(
    order: Sequence[int], copies: int, domains: Mapping[int, Domain] | None, placed: Sequence[int] = ()
) -> list[int]:
    """``copies`` distinct peers of ``order``, each the first one in
    ``order`` whose domain is farthest from those of the peers placed before
    it (``placed``, then the ones this call picked): greedy, in copy-rank
    order. Distinct sites while there are sites left, else distinct racks,
    else distinct hosts, else any peer; with every candidate equally near
    (``domains`` None, or one domain for all), the first ``copies`` of
    ``order``. Deterministic: the policy's order decides among equals.

    Parameters
    ----------
    order : peer indexes in the policy's order of preference (a random
        permutation, a rendezvous ranking, a stripe ring)
    copies : how many to pick, at most ``len(order)`` minus those in ``placed``
    domains : ``{peer_idx: Domain}`` of every peer in ``order`` and ``placed``
    placed : peers that already hold copies of the record (not picked again)

    Raises
    ------
    ValueError
        If ``order`` has fewer than ``copies`` peers outside ``placed``.
    """
    cands = [i for i in order if i not in placed]
    if len(cands) < copies:
        raise ValueError(f"{copies} copies need {copies} usable peers, {len(cands)} given")
    if domains is None:
        return cands[:copies]
    chosen: list[int] = []
    taken = list(placed)
    for _ in range(copies):
        best, best_at = None, -1
        for k, i in enumerate(cands):
            near = _nearness(i, taken, domains)
            if best is None or near < best:
                best, best_at = near, k
                if near == _APART:
                    break
        pick = cands.pop(best_at)
        chosen.append(pick)
        taken.append(pick)
    return chosen


def shares_domain(holders: Sequence[int], domains: Mapping[int, Domain] | None) -> bool:
    """Whether two of ``holders`` (the copies of one record) are in one
    failure domain: what a caller reports (docs/replication.md, "Failure
    domains"). False without ``domains``."""
    return domains is not None and len({domains[i] for i in holders}) < len(holders)


@dataclass
class DomainShortfall:
    """Records one writer placed with two copies in one failure domain,
    because the usable peers allowed no better (docs/replication.md,
    "Failure domains"): plain data on :attr:`st_py.client.file.StFile.domain_shortfall`.

    Attributes
    ----------
    records : int
        Records and stripes placed so (0: every record's copies are in
        distinct domains).
    first : str
        The first such record's name.
    domain : str
        A domain two of its copies share (``site/rack/host``).
    domains : int
        Distinct domains among the usable peers when it was placed.
    copies : int
        F of the file's class.
    """

    records: int = 0
    first: str = ""
    domain: str = ""
    domains: int = 0
    copies: int = 0

    def note(self, name: str, holders: Sequence[int], domains: Mapping[int, Domain], usable: Iterable[int]) -> bool:
        """Count record ``name`` if two of its ``holders`` share a domain;
        True the first time (when the caller logs it)."""
        if not shares_domain(holders, domains):
            return False
        self.records += 1
        if self.records > 1:
            return False
        seen: set[Domain] = set()
        for i in holders:
            if domains[i] in seen:
                self.domain = domain_text(domains[i])
                break
            seen.add(domains[i])
        self.first, self.copies, self.domains = name, len(holders), domain_count(usable, domains)
        return True


def spread_level(holders: Sequence[int], domains: Mapping[int, Domain] | None) -> int:
    """The coarsest path depth at which ``holders`` are all in distinct
    domains: 1 distinct sites (first components), 2 distinct racks, ...;
    ``len(domain)`` distinct domains; 0 if two share a domain (only
    distinct peers). With one holder, or without ``domains``, 1."""
    if domains is None or len(holders) < 2:
        return 1
    ds = [domains[i] for i in holders]
    if len(set(ds)) < len(ds):
        return 0
    depth = max(len(d) for d in ds)
    for level in range(1, depth + 1):
        if len({d[:level] for d in ds}) == len(ds):
            return level
    return depth


def choose_holders(
    usable: Sequence[int], copies: int, rng: random.Random | None = None, domains: Mapping[int, Domain] | None = None
) -> list[int]:
    """F distinct peers for a block of records, in copy-rank order.

    Parameters
    ----------
    usable : peer indexes that are alive and not known to have failed
    copies : F, the number of copies of the replication class
    rng : random source (default: the module's shared one)
    domains : ``{peer_idx: Domain}``; with it the peers are drawn in a random
        order and :func:`spread_holders` takes them apart by domain (a
        uniform draw among the peers farthest from those drawn before)

    Raises
    ------
    ValueError
        If fewer than ``copies`` peers are usable (callers turn this into
        :class:`~st_py.errors.NotEnoughPeersError` with context).
    """
    if len(usable) < copies:
        raise ValueError(f"{copies} copies need {copies} usable peers, {len(usable)} given")
    if domains is None:
        return (rng or random).sample(list(usable), copies)
    return spread_holders((rng or random).sample(list(usable), len(usable)), copies, domains)


def choose_spare(
    usable: Sequence[int],
    holders: Sequence[int],
    rng: random.Random | None = None,
    domains: Mapping[int, Domain] | None = None,
    apart_from: Sequence[int] | None = None,
) -> int | None:
    """A usable peer holding no copy of the record, to take over a failed
    copy (paper 4.3, 4.4), or None if there is none.

    Parameters
    ----------
    usable : peer indexes that may take the copy
    holders : peers excluded: every holder of the record (the failed one too)
    rng : random source
    domains : ``{peer_idx: Domain}``; with it, the spare is drawn among the
        candidates whose domain is farthest from those of ``apart_from``
    apart_from : the holders that keep their copies (default ``holders``):
        the failed copy's own domain is free again
    """
    spare = [i for i in usable if i not in holders]
    if not spare:
        return None
    spare = farthest(spare, holders if apart_from is None else apart_from, domains)
    return (rng or random).choice(spare)


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
    from st_py.errors import BadNameError

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
    in order (:meth:`st_py.client.reader.RecordReader.queue_get`)."""
    return sorted(peer_ids, key=lambda i: (-hash_weight(file_id, name, peer_ids[i]), i))


def hash_holders(
    file_id: int,
    name: str,
    peer_ids: Mapping[int, str],
    copies: int,
    usable: Collection[int] | None = None,
    domains: Mapping[int, Domain] | None = None,
) -> list[int]:
    """The F holders of record ``name`` under hash placement, in copy-rank
    order: the first ``copies`` peers of :func:`hash_ranking` that are in
    ``usable`` (default: all); with ``domains``, taken apart by failure
    domain (:func:`spread_holders` over the ranking: rendezvous hashing over
    domains, a domain ranking by its best peer's weight). Deterministic
    from the name, the peerlist and the domains.

    Raises
    ------
    ValueError
        If fewer than ``copies`` peers are usable.
    """
    ranked = hash_ranking(file_id, name, peer_ids)
    if usable is not None:
        ranked = [i for i in ranked if i in usable]
    return spread_holders(ranked, copies, domains)


def hash_spare(
    file_id: int,
    name: str,
    peer_ids: Mapping[int, str],
    usable: Collection[int],
    holders: Collection[int],
    domains: Mapping[int, Domain] | None = None,
    apart_from: Sequence[int] | None = None,
) -> int | None:
    """:func:`choose_spare` under hash placement: the usable peer holding no
    copy of record ``name`` that comes first in its ranking, where a reader
    without the infofile looks first; with ``domains``, the first of those
    farthest by domain from ``apart_from`` (default ``holders``). None if
    there is none."""
    spare = [i for i in hash_ranking(file_id, name, peer_ids) if i in usable and i not in holders]
    if not spare or domains is None:
        return spare[0] if spare else None
    return spread_holders(spare, 1, domains, list(holders if apart_from is None else apart_from))[0]


# -- local-first placement ---------------------------------------------------------


def pick_local_peer(
    addrs: Mapping[int, str],
    usable: Collection[int],
    local_hosts: Collection[str],
    prefer: str | None = None,
    rng: random.Random | None = None,
) -> int | None:
    """The peer of the writer's own node: the usable peer at address
    ``prefer`` (``host:port``) when given, else one usable peer whose host
    is in ``local_hosts``, drawn at random (callers keep it for the whole
    write, so one writer's rank-0 copies land on one peer). None if there is
    none.

    Parameters
    ----------
    addrs : ``{peer_idx: "host:port"}`` of the peerlist
    usable : peer indexes that are alive and not known to have failed
    local_hosts : this machine's addresses (:func:`st_py.client.getlocal.local_addresses`)
    """
    if prefer is not None:
        mine = [i for i in sorted(addrs) if addrs[i] == prefer and i in usable]
        if mine:
            return mine[0]
    local = [i for i in sorted(addrs) if i in usable and addrs[i].rsplit(":", 1)[0].strip("[]") in local_hosts]
    return (rng or random).choice(local) if local else None


def local_first_holders(
    usable: Sequence[int],
    copies: int,
    local: int | None,
    rng: random.Random | None = None,
    domains: Mapping[int, Domain] | None = None,
) -> list[int]:
    """F distinct peers with copy rank 0 on ``local`` (the writer's node)
    and the others drawn at random from the rest (with ``domains``, apart
    from ``local``'s domain and each other's: :func:`choose_holders`);
    plain random placement when ``local`` is None or not usable.

    Raises
    ------
    ValueError
        If fewer than ``copies`` peers are usable.
    """
    if local is None or local not in usable or len(usable) < copies:
        return choose_holders(usable, copies, rng, domains)
    others = [i for i in usable if i != local]
    if domains is None:
        return [local] + choose_holders(others, copies - 1, rng)
    return [local] + spread_holders((rng or random).sample(others, len(others)), copies - 1, domains, [local])


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


def stripe_holders(
    index: int,
    copies: int,
    ring: Sequence[int],
    width: int,
    local: int | None = None,
    local_share: float = 1.0,
    domains: Mapping[int, Domain] | None = None,
) -> list[int]:
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
    domains : ``{peer_idx: Domain}``; with it, the ranks after the first
        are the next peers of the ring apart by failure domain
        (:func:`spread_holders` over the ring from rank 0's place, and
        ``local`` last), not merely the next ones

    Raises
    ------
    ValueError
        If ``ring`` (with ``local``) holds fewer than F peers.
    """
    n = len(ring)
    if n + (local is not None) < copies:
        raise ValueError(f"{copies} copies need {copies} peers, {n + (local is not None)} given")
    first = index % max(1, min(width, n)) if n else 0
    turn = [ring[(first + k) % n] for k in range(n)]
    if local is None:
        return spread_holders(turn, copies, domains)
    if is_local_stripe(index, local_share):
        return [local] + spread_holders(turn, copies - 1, domains, [local])
    return spread_holders(turn + [local], copies, domains)


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
