"""Markov reliability model (CEFT section 6) of a class xF file: mean time
to data loss (MTTDL) and the probability of data loss within a mission time,
with a Monte-Carlo check that uses the real placement code.

The chain
---------
A file of R records of class xF is spread over N peers in blocks: every block
of ``blocksize`` consecutive records gets F distinct holders drawn uniformly
by :func:`st_py.core.placement.choose_holders` (``B = ceil(R / blocksize)``
blocks). Peers fail independently, each at rate ``lambda`` (1/h) while it is
up (exponential lifetimes, CEFT assumption 2). A failed peer is repaired --
its copies are written again from the surviving holders and it counts as up
-- after an exponential time of rate ``mu`` (1/h).

The state is k, the number of failed (not yet repaired) peers, k = 0..N-1,
plus one absorbing state DL (data loss: some record has all F copies on
failed peers). From state k:

* a failure, at total rate ``(N-k) lambda``, goes to k+1 with the *safety
  probability* ``r_k = s(k+1) / s(k)`` and to DL with ``1 - r_k``;
* a repair goes to k-1 at rate ``k mu`` (``repair="parallel"``, the default)
  or ``mu`` for k >= 1 (``repair="serial"``).

Repair rate per failed peer (the default) is CEFT's choice (its eq. 10: the
rate back to one failure fewer is the number of failed nodes times mu, with
MTTR = 1/mu, as in the classic RAID-1 model): every failed peer is repaired
independently and in parallel. That is how StoreTorrent repairs:
``rebalance`` reads each lost copy from any live holder and writes it to a
spare, so the repairs of different failed peers need not wait for each
other. ``"serial"`` (one repair
process working through the failed peers one at a time) is the model of an
operator running one rebalance after another. The two differ only in the
states k >= 2, so they agree closely for x1 and x2 and differ for x3.

The safety probability (CEFT eqs. 5-7)
---------------------------------------
CEFT computes the probability that the system "remains functional" when one
more node fails as the ratio of the probabilities that it is functional with
the larger and with the smaller failed set, ``P(m+1) / P(m)``, where P(m) is
the probability that m nodes failed at random do not include a whole mirror
pair. Here, with k failed peers forming a uniformly random k-subset (peers
are exchangeable and the failures independent of the placement), one block's
F holders (a uniform F-subset of the N peers) are all failed with probability
``C(k, F) / C(N, F)`` (hypergeometric, as in :mod:`st_tools.dataloss`), and
the B blocks are placed independently, so

    s(k) = P(no block has all F holders among k failed peers)
         = (1 - C(k, F) / C(N, F)) ** B.

Since a failure adds a peer to the failed set, the failed set of k+1 peers
contains the one of k peers, and "safe with k+1 failed" implies "safe with k
failed": ``P(safe at k+1 | safe at k) = s(k+1) / s(k)``. For the first
transition that can lose data, k+1 = F, ``s(F-1) = 1`` and the branch to DL
is the probability that a given set of F failed peers shares at least one
record,

    1 - s(F) = 1 - (1 - 1 / C(N, F)) ** B,        B = ceil(R / blocksize),

the figure the issue asks for. ``s(k) = 1`` for k < F (no loss possible) and
``s(N) = 0`` (every peer failed), so the failure from state N-1 always goes to
DL. If B >> C(N, F) every F-set holds a block, ``1 - s(F) = 1``, and the chain
is the classic one absorbed at the F-th concurrent failure.

What the chain ignores (as CEFT does): after a repair the failed set is no
longer a superset of earlier ones, and the chain forgets which sets were
already seen to be safe: it draws the safety of every new state afresh from
s(k). This is exact when nothing is repaired before the loss (mu = 0) and
when ``1 - s(F) = 1``; otherwise the chain is an approximation, which the
Monte-Carlo simulation (:func:`simulate`) measures.

Numerics (no scipy)
-------------------
* MTTDL is the expected absorption time from state 0, the solution of
  ``-Q_T tau = 1`` on the transient states (Q_T the generator restricted to
  them). The chain is tridiagonal, so the system is solved by elimination
  from the top state down: with ``tau_k = x_k + y_k tau_(k-1)``,

      e_k = b_k + c_k + a_k z_(k+1),  x_k = (1 + a_k x_(k+1)) / e_k,
      y_k = b_k / e_k,  z_k = 1 - y_k = (c_k + a_k z_(k+1)) / e_k,

  (a_k, b_k, c_k the rates up, down and to DL); every step adds and divides
  positive numbers, so MTTDL keeps full relative precision however many
  times larger than the repair time it is (no cancellation, unlike the
  subtraction of nearly equal numbers in a dense LU solve).
* ``P(loss by t)`` is the DL entry of row 0 of ``exp(Q t)``, computed by
  uniformization and squaring: with ``Lambda = max_k`` total rate and
  ``P = I + Q / Lambda`` (a non-negative matrix), ``exp(Q h) = exp(-Lambda
  h) sum_n (Lambda h)^n / n! P^n`` for a step ``h = t / 2^s`` with
  ``Lambda h <= 1/2`` (the series is cut at 30 terms, relative error below
  1e-30), then s squarings of ``[[E, L], [0, 1]]``: ``L <- L + E L``,
  ``E <- E E``. Every operation is on non-negative numbers, so a tiny loss
  probability (1e-12) keeps its relative precision, which ``1 - survival``
  would not; the s squarings multiply the rounding error of the first step
  by ``2^s ~ Lambda t``, so the relative error is about ``Lambda t * 1e-16``
  (1e-7 for a 100-peer file with one-hour repairs over 1,000 years). The cost
  is O(N^3 log(Lambda t)). Eigen-decomposition was rejected: symmetrising the
  birth-death generator needs scale factors ``prod sqrt(a_i / b_(i+1))`` that
  underflow for N = 100 and lambda/mu = 1e-4, and its eigenvectors have
  absolute, not relative, accuracy.

Monte-Carlo check
-----------------
:func:`simulate` places the records with the real code (the peerlist from
the tracker's ``schedule()`` and one ``choose_holders`` call per block, via
:func:`st_tools.dataloss.place_records`), then runs an event-driven
simulation with per-peer exponential failure clocks and exponential repair
times (a heap of events), until some block has all its holders failed. Two
repair policies: ``"rebuild"`` (the failed peer comes back with its copies,
written again from the survivors: the placement never changes, as the
chain's symmetric peers assume) and ``"respread"`` (StoreTorrent's
rebalance: each of the failed peer's copies moves to a spare drawn by
:func:`st_py.core.placement.choose_spare` among the live peers holding no copy of
its block, and the peer is replaced by an empty one).

Correlated failures (failure domains)
------------------------------------
With ``domains=D`` (``--domains D``) the units that fail are whole racks,
not peers: the N peers sit in D racks of N/D (peer i in rack ``i mod D``,
declared as its ``--domain``, :func:`st_tools.dataloss.rack_of`), each
rack fails at rate ``lambda`` (its switch or power feed: every peer of it at
once) and is repaired at rate ``mu``, and k is the number of racks down.
The chain is the same birth-death chain over D units; only the safety
probability changes, to the exact one of the placement
(:func:`st_tools.dataloss.exact_domain_loss` per block):

* domain-aware placement (what the client does when the peerlist spans
  several domains, docs/replication.md, "Failure domains"): a block's F
  copies are on F distinct racks, ``s(k) = (1 - C(k, F)/C(D, F))^B``, so
  no data is lost before F racks are down at once;
* blind placement: the k racks' ``kN/D`` peers are a failed set like any
  other, ``s(k) = (1 - C(kN/D, F)/C(N, F))^B``, and the first rack lost
  already loses data when B is large.

Peer failures within racks are left out of this mode (they add the
independent chain's rate of loss); :func:`simulate` checks it with the real
placement code, repair ``"rebuild"`` only.

Run ``python -m st_tools.reliability --help``; the results are in
docs/reliability.md, sections "Markov reliability model (CEFT section 6)"
and "Correlated failures".

Layers (each imports only those above it): :mod:`.model` (the parameters
:class:`ClusterParams`, the chain and its numerics, pure),
:mod:`.simulation` (the Monte-Carlo check with the real placement code of
:mod:`st_tools.dataloss.simulation`), :mod:`.stats` (intervals, summaries,
z scores), :mod:`.analysis` (the whole analysis and its typed results),
:mod:`.report` (table and figure), :mod:`.cli` (the command line,
``__main__``). The functions with the parameters written out
(:func:`build_chain`, :func:`mttdl_hours`, :func:`loss_probability`,
:func:`model`, :func:`required_repair_rate`, :func:`simulate`) make a
:class:`ClusterParams` and call the functions that take one (:func:`chain`,
:func:`mttdl`, :func:`loss_by`, :func:`class_model`,
:func:`repair_rate_for`, :func:`run_simulation`). This package face
re-exports their public names.
"""

from st_tools.reliability.analysis import Analysis, ClassResult, Curve, RepairNeed, analyse
from st_tools.reliability.cli import main
from st_tools.reliability.model import (
    DEFAULT_RECORDS,
    HOURS_PER_YEAR,
    REPAIR_MODES,
    Chain,
    ClassDurability,
    ClassModel,
    ClusterParams,
    build_chain,
    chain,
    class_model,
    cluster_durability,
    log_safety,
    log_safety_domains,
    loss_by,
    loss_probability,
    model,
    mttdl,
    mttdl_hours,
    repair_rate_for,
    required_repair_rate,
)
from st_tools.reliability.report import plot, print_report
from st_tools.reliability.simulation import SIM_REPAIRS, SimResult, run_simulation, simulate
from st_tools.reliability.stats import Z95, SimSummary, summarize, wilson

__all__ = [
    "DEFAULT_RECORDS",
    "HOURS_PER_YEAR",
    "REPAIR_MODES",
    "SIM_REPAIRS",
    "Z95",
    "Analysis",
    "Chain",
    "ClassDurability",
    "ClassModel",
    "ClassResult",
    "ClusterParams",
    "Curve",
    "RepairNeed",
    "SimResult",
    "SimSummary",
    "analyse",
    "build_chain",
    "chain",
    "class_model",
    "cluster_durability",
    "log_safety",
    "log_safety_domains",
    "loss_by",
    "loss_probability",
    "main",
    "model",
    "mttdl",
    "mttdl_hours",
    "plot",
    "print_report",
    "repair_rate_for",
    "required_repair_rate",
    "run_simulation",
    "simulate",
    "summarize",
    "wilson",
]
