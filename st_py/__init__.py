"""StoreTorrent: a distributed storage layer for datasets of many small records.

The client library (paper section 3, figure 4)::

    import st_py
    f = st_py.create("/exp/run1", replication="x2", est_size=1 << 30)
    f.put("rec-0001", data); f.queue_put("rec-0002", data2); f.close()
    f = st_py.open("/exp/run1"); data = f.get("rec-0001")
    for r in f.get_local(): open(r.path, "rb").read()
"""

from typing import TYPE_CHECKING

from .errors import *  # noqa: F401,F403
from .errors import StoreTorrentError

# The client library is imported when first used (PEP 562), not with the
# package: the tracker and the tools import st_py.<module> without loading it.
_LAZY = {
    "Client": "client",
    "create": "client",
    "open": "client",
    "StFile": "file",
    "GetLocalPlan": "getlocal",
    "LocalRecord": "getlocal",
    "reveal": "getlocal",
    "Pending": "pending",
}

if TYPE_CHECKING:
    from .client import Client, create, open
    from .file import StFile
    from .getlocal import GetLocalPlan, LocalRecord, reveal
    from .pending import Pending


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
    "LocalRecord",
    "GetLocalPlan",
    "reveal",
    "StoreTorrentError",
]
__version__ = "0.1.0"
