"""StoreTorrent: a distributed storage layer for datasets of many small records.

The client library (paper section 3, figure 4)::

    import st_py
    f = st_py.create("/exp/run1", replication="x2", est_size=1 << 30)
    f.put("rec-0001", data); f.queue_put("rec-0002", data2); f.close()
    f = st_py.open("/exp/run1"); data = f.get("rec-0001")
    for r in f.get_local(): open(r.path, "rb").read()
"""

from .client import Client, create, open
from .errors import *  # noqa: F401,F403
from .errors import StoreTorrentError
from .file import StFile
from .getlocal import GetLocalPlan, LocalRecord, reveal
from .pending import Pending

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
