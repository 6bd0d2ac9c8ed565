"""Record placement (paper 3.1, 4.2): which peers hold the copies of a record.

Placement is non-deterministic: each block of ``blocksize`` consecutive
records gets F distinct peers drawn uniformly at random from the file's usable
peers, copy rank r going to the r-th peer drawn. A copy that fails moves to a
usable peer that holds no copy of the record yet (paper 4.3), so the F copies
always sit on F distinct peers (invariant 3, paper 3.7).

The client (:mod:`st_py.file`), rebalance (:mod:`st_py.rebalance`) and the
data-loss analysis (:mod:`st_tools.dataloss`) all call these functions, so
the analysis measures the placement that is really used.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

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
