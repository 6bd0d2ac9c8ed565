"""Replication classes (paper 4.1): ``xF`` stores F whole copies of each record
on F distinct peers with copy ranks 0..F-1 and tolerates F-1 peer failures."""

from __future__ import annotations

import re

from st_py.errors import BadNameError

MAX_COPIES = 8


def copies(replication: str) -> int:
    """The number of copies F of class ``xF``.

    Raises
    ------
    BadNameError
        For a class other than x1 .. x8.
    """
    m = re.fullmatch(r"x([1-9][0-9]*)", replication or "")
    if not m or int(m.group(1)) > MAX_COPIES:
        raise BadNameError(f"unknown replication class {replication!r}: use x1, x2, x3 ... x{MAX_COPIES}")
    return int(m.group(1))


# Duplication protocols (CEFT seed 001 section 4; BLAST seed 002 section V.B),
# chosen per file at create (docs/replication.md):
#   client-sync   the client writes every copy and waits for all (the default)
#   chain         the client sends one copy to rank 0, which forwards it down
#                 the holders (HDFS's pipeline); the reply comes when the last
#                 copy is stored
#   client-async  the client writes every copy; the record is acknowledged and
#                 committed once rank 0 is stored, the others follow
#   chain-async   chain, acknowledged once rank 0 is stored
PROTOCOLS = ("client-sync", "chain", "client-async", "chain-async")
DEFAULT_PROTOCOL = "client-sync"


def check_protocol(protocol: str) -> str:
    """The protocol name (``""`` means the default).

    Raises
    ------
    BadNameError
        For a name not in :data:`PROTOCOLS`.
    """
    protocol = protocol or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        raise BadNameError(f"unknown duplication protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    return protocol


def is_chain(protocol: str) -> bool:
    """Whether ``protocol`` forwards copies down the holders (``chain``, ``chain-async``)."""
    return protocol in ("chain", "chain-async")


def is_async(protocol: str) -> bool:
    """Whether ``protocol`` acknowledges a record once copy rank 0 is stored (``client-async``, ``chain-async``)."""
    return protocol in ("client-async", "chain-async")
