"""Replication classes (paper 4.1): ``xF`` stores F whole copies of each record
on F distinct peers with copy ranks 0..F-1 and tolerates F-1 peer failures."""

from __future__ import annotations

import re

from .errors import BadNameError

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
