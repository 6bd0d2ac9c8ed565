"""The formulas of the data-loss analysis (paper 4.2): the exact fraction of
records lost when G of N peers fail, the paper's formula and its limit, the
spread blocks add, and the exact fractions when whole failure domains fail.
Pure: no placement code, no randomness (:mod:`st_tools.dataloss` describes
the analysis).
"""

from __future__ import annotations

import math

import numpy as np

#: The paper's worked example (4.2): N=100 peers, class x2, two failed peers.
PAPER_EXAMPLE = {"peers": 100, "copies": 2, "failed": 2, "value": 1 / 100 * 1 / 99}


def check_args(peers: int, copies: int, failed: int) -> None:
    """Validate N, F, G; raise ValueError with a clear message."""
    if peers < 1:
        raise ValueError(f"the number of peers N must be >= 1, got {peers}")
    if copies < 1:
        raise ValueError(f"the number of copies F (class xF) must be >= 1, got {copies}")
    if copies > peers:
        raise ValueError(f"class x{copies} needs {copies} distinct peers, but only N={peers} exist (F > N)")
    if failed < 0:
        raise ValueError(f"the number of failed peers G must be >= 0, got {failed}")
    if failed > peers:
        raise ValueError(f"cannot fail G={failed} peers out of N={peers} (G > N)")


def exact_unavailable(peers: int, copies: int, failed: int) -> float:
    """Exact probability that a record has all its copies on failed peers.

    With the F holders a uniformly random F-subset of the N peers (what
    :func:`st_py.core.placement.choose_holders` draws) and a set C of G failed
    peers chosen independently of the placement, the number of holders in C is
    hypergeometric, and

    ``P(all F copies in C) = C(G, F) / C(N, F) = prod_{i<F} (G-i) / (N-i)``.

    Parameters
    ----------
    peers : int
        N, the number of peers in the file's peerlist (>= 1).
    copies : int
        F, the copies of the replication class xF (1 <= F <= N).
    failed : int
        G, the number of failed peers (0 <= G <= N).

    Returns
    -------
    float
        Probability in [0, 1] (equivalently the expected fraction of records
        unavailable); 0 when G < F.

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N, G < 0 or G > N.

    Notes
    -----
    Source: paper section 4.2, corrected (see :func:`paper_formula`).
    """
    check_args(peers, copies, failed)
    return math.comb(failed, copies) / math.comb(peers, copies)


def paper_formula(peers: int, copies: int, failed: int) -> float:
    """The paper's formula ``P = G/N * G/(N-1) * ...`` with F factors.

    The paper prints ``G/N*G/(N-1)*...G/(N-F)``; read literally that has
    F+1 factors, which would not even give G/N for x1, so the F-factor
    reading ``prod_{i<F} G/(N-i)`` (the pattern of its worked example
    ``1/100 * 1/99``) is used. It is an upper bound of
    :func:`exact_unavailable`: the ratio is ``G**F / (G(G-1)...(G-F+1))``,
    which is 1 for F=1, ``G/(G-1)`` for F=2 (2 at G=2) and tends to 1 only
    when G >> F.

    Parameters
    ----------
    peers, copies, failed : int
        N, F and G as in :func:`exact_unavailable`.

    Returns
    -------
    float
        The paper's value (not a probability bounded by 1 in general).

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N, G < 0 or G > N.

    Notes
    -----
    Source: paper section 4.2.
    """
    check_args(peers, copies, failed)
    return math.prod(failed / (peers - i) for i in range(copies))


def paper_limit(peers: int, copies: int, failed: int) -> float:
    """The paper's approximation "for F << N this approaches (G/N)^F".

    Also an upper bound of :func:`exact_unavailable`; it is close to the
    exact value only when F << G (not merely F << N).

    Parameters
    ----------
    peers, copies, failed : int
        N, F and G as in :func:`exact_unavailable`.

    Returns
    -------
    float
        ``(G/N)**F``.

    Raises
    ------
    ValueError
        If N < 1, F < 1, F > N, G < 0 or G > N.

    Notes
    -----
    Source: paper section 4.2.
    """
    check_args(peers, copies, failed)
    return (failed / peers) ** copies


def block_weights(records: int, blocksize: int) -> np.ndarray:
    """Records per block when ``records`` records are cut into blocks.

    Parameters
    ----------
    records : int
        R >= 1.
    blocksize : int
        Records per block, >= 1; the last block may be shorter.

    Returns
    -------
    numpy.ndarray, shape (ceil(R / blocksize),), int64
        Records in each block; sums to R.

    Raises
    ------
    ValueError
        If ``records`` or ``blocksize`` is < 1.
    """
    if records < 1:
        raise ValueError(f"records must be >= 1, got {records}")
    if blocksize < 1:
        raise ValueError(f"blocksize must be >= 1, got {blocksize}")
    nblocks = -(-records // blocksize)
    w = np.full(nblocks, blocksize, dtype=np.int64)
    w[-1] = records - blocksize * (nblocks - 1)
    return w


def trial_std(p: float, records: int, blocksize: int) -> float:
    """Theoretical standard deviation of the unavailable fraction of one trial.

    Each block is lost independently with probability p and takes all its
    records with it, so the fraction ``sum_j w_j X_j / R`` has variance
    ``p (1-p) sum_j w_j**2 / R**2`` -- about ``p (1-p) blocksize / R``,
    i.e. blocks multiply the standard deviation by ``sqrt(blocksize)`` and
    leave the mean at p.

    Parameters
    ----------
    p : float
        Per-record (= per-block) loss probability, in [0, 1].
    records : int
        R, records placed per trial.
    blocksize : int
        Records per block.

    Returns
    -------
    float
        Standard deviation of the per-trial fraction (dimensionless).

    Raises
    ------
    ValueError
        If p is outside [0, 1], or records/blocksize < 1.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    w = block_weights(records, blocksize).astype(np.float64)
    return math.sqrt(p * (1.0 - p) * float(np.sum(w * w))) / records


def rack_of(peer: int, domains: int) -> int:
    """The rack (failure domain) of simulated peer ``peer`` among ``domains``:
    ``peer mod domains``, so racks differ in size by at most one peer."""
    return peer % domains


def check_domain_args(peers: int, domains: int, copies: int, failed_domains: int) -> None:
    """Validate N, F (as :func:`check_args`), the number of failure domains D
    (1..N) and of failed domains (0..D). Raises ValueError with a clear message."""
    check_args(peers, copies, 0)
    if domains < 1:
        raise ValueError(f"the number of failure domains D must be >= 1, got {domains}")
    if domains > peers:
        raise ValueError(f"D={domains} failure domains need at least as many peers, N={peers} (D > N)")
    if not 0 <= failed_domains <= domains:
        raise ValueError(f"cannot fail {failed_domains} of D={domains} failure domains")


def exact_domain_loss(peers: int, domains: int, copies: int, failed_domains: int, aware: bool) -> float:
    """Exact probability that a record has every copy in ``failed_domains``
    failed domains (chosen uniformly, independently of the placement).

    * Domain-aware placement with D >= F: the F copies are in F distinct
      domains, a uniform F-subset of the D (racks of equal size; sizes that
      differ by one peer skew this slightly), so the probability is
      ``C(g, F) / C(D, F)``: 0 until F domains are down.
    * Domain-aware with D < F: every domain holds a copy, so a record is
      lost only when all D are down.
    * Blind placement: the failed peers are the g domains' peers, G of N
      (G = g N / D when D divides N), and the F holders a uniform F-subset:
      ``C(G, F) / C(N, F)``, as :func:`exact_unavailable`.

    Parameters
    ----------
    peers, domains, copies, failed_domains : int
        N, D (the peers of rack d are those with ``i mod D == d``), F, g.
    aware : bool
        Domain-aware (True) or blind placement.

    Returns
    -------
    float
        Probability in [0, 1].

    Raises
    ------
    ValueError
        For N < 1, F > N, D < 1, D > N or g outside 0..D.

    Notes
    -----
    Paper section 4.2 (the "twin nodes" and racks of its last paragraph).
    """
    check_domain_args(peers, domains, copies, failed_domains)
    if aware:
        if domains >= copies:
            return math.comb(failed_domains, copies) / math.comb(domains, copies)
        return 1.0 if failed_domains == domains else 0.0
    if peers % domains == 0:
        return exact_unavailable(peers, copies, failed_domains * peers // domains)
    # racks of two sizes: average over which racks fail (exact, by their sizes)
    big, small = peers % domains, domains - peers % domains  # racks of size q+1 and q
    q = peers // domains
    total = 0.0
    for b in range(max(0, failed_domains - small), min(big, failed_domains) + 1):
        w = math.comb(big, b) * math.comb(small, failed_domains - b) / math.comb(domains, failed_domains)
        total += w * exact_unavailable(peers, copies, b * (q + 1) + (failed_domains - b) * q)
    return total
