"""The StoreTorrent tracker: a grpc.aio service (paper sections 3.3 and 3.5).

Run it with ``python -m st_py.tracker --root NAMESPACE --state-dir DIR``.
"""

from .server import serve

__all__ = ["serve"]
