"""The wire: how StoreTorrent's processes talk (docs/architecture.md, "The
client package by role").

The peers' length-prefixed binary protocol (:mod:`~st_py.wire.protocol`,
docs/wire-protocol.md) and its pipelined connections
(:mod:`~st_py.wire.transport`), the tracker's gRPC client
(:mod:`~st_py.wire.tracker_client`), TLS for that channel
(:mod:`~st_py.wire.tls`) and where the tracker is (:mod:`~st_py.wire.locate`).
Built on :mod:`st_py.core` only.
"""
