"""A public path kept for users and scripts: ``from st_py import repair``
(docs/replication.md). The module is :mod:`st_py.maintenance.repair`."""

from st_py.maintenance.repair import *  # noqa: F401,F403
from st_py.maintenance.repair import repair, watch  # noqa: F401
