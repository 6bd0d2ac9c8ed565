"""Data-loss analysis (paper 4.2): how many records become unavailable when
G of N storage nodes fail?

The tool places records with the real placement code -- the peerlist comes
from :func:`st_py.tracker.scheduler.schedule` and every block of
``blocksize`` consecutive records gets its F holders from
:func:`st_py.core.placement.choose_holders`, exactly as :class:`st_py.client.file.StFile`
does -- then fails G peers chosen uniformly at random and counts the records
whose F copies are all on failed peers. It compares the measured fraction
with

* the exact probability under uniform placement of F distinct holders, the
  hypergeometric ``C(G, F) / C(N, F) = G(G-1)...(G-F+1) / (N(N-1)...(N-F+1))``;
* the paper's formula ``G/N * G/(N-1) * ... `` (F factors) and its limit
  ``(G/N)**F``;
* the paper's worked example (N=100, x2, two failures: ``1/100 * 1/99``).

Blocks do not change the expected fraction (every block is placed uniformly),
but a whole block is lost or kept together, so the spread of the fraction
across files/trials grows like ``sqrt(blocksize)``; the tool measures it by
repeating the run with ``--compare-blocksize`` (default 1).

**Failure domains** (``--domains D``, docs/reliability.md, "Correlated
failures"). The peers are split evenly into D racks (peer i in rack
``i mod D``, declared as its ``--domain``), whole racks fail (a switch, a
power feed: the paper's "nodes failing in the same rack", 4.2) and the tool
compares the records lost with the client's domain-aware placement
(:func:`st_py.core.placement.choose_holders` with the peers' domains, as
:class:`st_py.client.file.StFile` places when the peerlist spans several domains)
and with domain-blind placement (without them), against the exact
fractions :func:`exact_domain_loss`. The paper's claim that its analysis
"does not require the failures to be independent" holds for the expected
fraction at a given number of failed *peers*; a rack failure fails N/D
peers at once, which blind placement turns into a loss of about
``(1/D)^F`` of the records at the first rack lost, and aware placement into
none until F racks are down.

Run ``python -m st_tools.dataloss --help``; the results are in
docs/reliability.md.

Layers (each imports only those above it): :mod:`.model` (the formulas,
pure), :mod:`.simulation` (the real placement code: peerlists, placement,
failures), :mod:`.analysis` (the whole analyses and their typed results),
:mod:`.report` (tables and figures), :mod:`.cli` (the command line,
``__main__``). This package face re-exports their public names.
"""

from st_py.core.placement import DEFAULT_BLOCKSIZE, Domain, choose_holders
from st_py.tracker.peers import PeerInfo
from st_py.tracker.scheduler import schedule
from st_tools.dataloss.analysis import (
    DomainAnalysis,
    DomainRow,
    LossAnalysis,
    LossRow,
    Measured,
    PaperExample,
    analyse,
    analyse_domains,
)
from st_tools.dataloss.cli import main
from st_tools.dataloss.model import (
    PAPER_EXAMPLE,
    block_weights,
    exact_domain_loss,
    exact_unavailable,
    paper_formula,
    paper_limit,
    rack_of,
    trial_std,
)
from st_tools.dataloss.report import plot, plot_domains, print_domain_report, print_report
from st_tools.dataloss.simulation import (
    PEER_FREE_BYTES,
    RECORD_BYTES,
    DomainFractions,
    make_peerlist,
    place_records,
    simulate,
    simulate_domains,
    unavailable_fraction,
)

__all__ = [
    "DEFAULT_BLOCKSIZE",
    "PAPER_EXAMPLE",
    "PEER_FREE_BYTES",
    "RECORD_BYTES",
    "Domain",
    "DomainAnalysis",
    "DomainFractions",
    "DomainRow",
    "LossAnalysis",
    "LossRow",
    "Measured",
    "PaperExample",
    "PeerInfo",
    "analyse",
    "analyse_domains",
    "block_weights",
    "choose_holders",
    "exact_domain_loss",
    "exact_unavailable",
    "main",
    "make_peerlist",
    "paper_formula",
    "paper_limit",
    "place_records",
    "plot",
    "plot_domains",
    "print_domain_report",
    "print_report",
    "rack_of",
    "schedule",
    "simulate",
    "simulate_domains",
    "trial_std",
    "unavailable_fraction",
]
