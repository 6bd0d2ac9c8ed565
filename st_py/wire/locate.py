"""Where the tracker is: the one place that knows how a client finds a
cluster (an address given, ``$STORETORRENT_TRACKER``, or the ``cluster.json``
that ``storetorrent up`` writes into its data folder)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from st_py.errors import NoTrackerError

TRACKER_ENV = "STORETORRENT_TRACKER"
DATA_ENV = "STORETORRENT_DATA"
CLUSTER_FILE = "cluster.json"


def read_cluster_file(data_dir: str | Path) -> dict | None:
    """Addresses of the local cluster running in ``data_dir`` (``tracker``,
    ``peers``, ``namespace``, ``pid``, ``tls``, ``status``: the tracker's
    status page and metrics ``HOST:PORT``, ``s3``: the S3 endpoint's
    ``http://HOST:PORT`` or None), or None."""
    p = Path(data_dir) / CLUSTER_FILE
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def default_tracker() -> str:
    """The tracker address from ``$STORETORRENT_TRACKER``, or the local
    cluster started by ``storetorrent up`` in ``$STORETORRENT_DATA`` (default
    ``./st-data``).

    Raises
    ------
    NoTrackerError
        If neither gives one.
    """
    addr = os.environ.get(TRACKER_ENV)
    if addr:
        return addr
    info = read_cluster_file(os.environ.get(DATA_ENV, "st-data"))
    if info:
        return info["tracker"]
    raise NoTrackerError(
        f"no tracker address: pass tracker=..., set ${TRACKER_ENV}, or start a local cluster with `storetorrent up`"
    )
