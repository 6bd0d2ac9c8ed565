"""Maintenance: operations that keep a cluster's copies where they belong,
built on the client library as any user program is (docs/architecture.md,
"The client package by role"; leveldb's ``db/repair.cc`` is the model).

:mod:`~st_py.maintenance.repair` (pending, quarantined and gone copies back
to F; the repair service loop), :mod:`~st_py.maintenance.rebalance` (the
copies of lost peers), :mod:`~st_py.maintenance.spread` (spreading copies
onto new peers) and :mod:`~st_py.maintenance.drain` (draining a peer out of
service), both moving copies with :mod:`~st_py.maintenance.moves`, and
:mod:`~st_py.maintenance.recover` (the namespace recovered from the peers'
infofile mirrors).
"""
