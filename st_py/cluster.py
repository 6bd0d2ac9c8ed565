"""A public path kept for users and the notebook: ``from st_py.cluster import
LocalCluster``. The module is :mod:`st_py.deploy.cluster`."""

from st_py.deploy.cluster import *  # noqa: F401,F403
from st_py.deploy.cluster import Daemon, LocalCluster, find_peer_binary  # noqa: F401
