"""StoreTorrent: a distributed storage layer for datasets of many small records.

The client library (paper section 3, figure 4)::

    import st_py
    f = st_py.create("/exp/run1", replication="x2", est_size=1 << 30)
    f.put("rec-0001", data); f.queue_put("rec-0002", data2); f.close()
    f = st_py.open("/exp/run1"); data = f.get("rec-0001")
    for r in f.get_local(): open(r.path, "rb").read()
"""

from typing import TYPE_CHECKING

from st_py.errors import *  # noqa: F401,F403
from st_py.errors import StoreTorrentError

# The client library is imported when first used (PEP 562), not with the
# package: the tracker imports st_py.core and st_py.wire without loading it
# (docs/architecture.md, "The client package by role").
_LAZY = {
    "Client": "client.client",
    "create": "client.client",
    "open": "client.client",
    "StFile": "client.file",
    "GetLocalPlan": "client.getlocal",
    "LocalRecord": "client.getlocal",
    "reveal": "client.getlocal",
    "Pending": "client.pending",
    "WriteBatch": "client.write_batch",
}

if TYPE_CHECKING:
    from st_py.client.client import Client, create, open
    from st_py.client.file import StFile
    from st_py.client.getlocal import GetLocalPlan, LocalRecord, reveal
    from st_py.client.pending import Pending
    from st_py.client.write_batch import WriteBatch


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'st_py' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Client",
    "create",
    "open",
    "StFile",
    "Pending",
    "WriteBatch",
    "LocalRecord",
    "GetLocalPlan",
    "reveal",
    "StoreTorrentError",
]
__version__ = "0.1.0"
