"""The core: what every other part of StoreTorrent shares and the tracker is
built on (docs/architecture.md, "The client package by role").

The namespace's rules (:mod:`~st_py.core.namespace`), placement and
replication classes (:mod:`~st_py.core.placement`,
:mod:`~st_py.core.replication`), record formats and their detection
(:mod:`~st_py.core.record_format`), the infofile's schema and reader
(:mod:`~st_py.core.infofile`), the one model of a record's copies
(:mod:`~st_py.core.copy_health`), capabilities, client-side filters, log
lines, units and the optional features found through entry points
(:mod:`~st_py.core.extras`). Nothing here imports the wire, the client, the
tracker or anything above them.
"""
