"""Optional features, found through package entry points.

The core package never imports the layers above it (the tools in
``st_tools``, the analysis integrations in ``st_integrations``;
``tests/test_layout.py`` checks it). What those layers add to the core is
registered by them as entry points in ``pyproject.toml`` and found here, the
one place the core asks whether an optional feature is installed:

============================  =============================================
group                         what an entry point names
============================  =============================================
``storetorrent.commands``     a click command added to ``storetorrent``
                              (``demo``, ``sql``, ``s3``)
``storetorrent.durability``   ``cluster``: the durability model ``status``
                              prints (``cluster_durability(peers, records,
                              copies_per_s, peer_mtbf_years)``)
============================  =============================================

Thread safety: the lookups are read-only and may run from any thread.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any

COMMANDS = "storetorrent.commands"
DURABILITY = "storetorrent.durability"


@functools.cache
def names(group: str) -> tuple[str, ...]:
    """The names registered in entry-point ``group``, sorted."""
    return tuple(sorted({ep.name for ep in entry_points(group=group)}))


def load(group: str, name: str) -> Any:
    """The object entry point ``name`` of ``group`` names, or None if no
    installed package registers it.

    Raises
    ------
    ImportError
        The registering package is installed but its module does not import
        (a missing dependency of that feature): the message names it.
    """
    for ep in entry_points(group=group, name=name):
        return ep.load()
    return None
