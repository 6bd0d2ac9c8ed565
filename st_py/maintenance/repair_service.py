"""The repair service: :func:`st_py.maintenance.repair.watch` kept running
against one tracker, started again whenever it stops (``storetorrent up``'s
healer; ``storetorrent repair --watch`` is the same service in its own
process, deploy/storetorrent-repair.service)."""

from __future__ import annotations

import logging
import threading

from st_py.client.client import Client
from st_py.maintenance import repair as rp

log = logging.getLogger("storetorrent.repair")


def run_repair_service(
    tracker_addr: str, tls, interval: float, stop: threading.Event, poll: float = rp.DEFAULT_POLL_S
) -> None:
    """Repair the cluster of the tracker at ``tracker_addr`` until ``stop``
    is set: a pass every ``interval`` seconds, and at once when a peer
    returns or has been failed the tracker's ``--failed-after``
    (:func:`~st_py.maintenance.repair.watch`), reporting its progress to the
    tracker. ``tls`` is the client's TLS settings (``LocalCluster.client_tls``
    or None). A pass that finds something to do is logged at INFO on the
    ``storetorrent.repair`` logger. If the service stops (the tracker
    restarting on a new port, ...) it is logged as a WARNING and started
    again after ``min(interval, 5)`` seconds. Runs in the calling thread;
    returns only once ``stop`` is set."""

    def show(r) -> None:
        if r.pending_found or r.lost_peers or not r.complete:
            log.info("repair %s", r.as_dict())

    while not stop.is_set():
        try:
            with Client(tracker_addr, tls=tls) as c:
                rp.watch(c, interval, on_report=show, stop=stop.is_set, poll=min(rp.DEFAULT_POLL_S, poll))
        except Exception as e:  # the tracker restarting on a new port, ...: start again
            log.warning("repair service stopped (%s); starting it again", e)
            stop.wait(min(interval, 5.0))
