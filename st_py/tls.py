"""A public path kept for users and scripts: ``st_py.tls.make_local_ca``
(docs/deployment.md). The module is :mod:`st_py.wire.tls`."""

from st_py.wire.tls import *  # noqa: F401,F403
from st_py.wire.tls import make_local_ca  # noqa: F401
