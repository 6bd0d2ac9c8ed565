"""Starting clusters (docs/architecture.md, "The client package by role";
dask/distributed's ``deploy/`` is the model).

:class:`~st_py.deploy.cluster.LocalCluster` (a tracker and N peers on this
machine, the demo's and the tests'), the supervisor that keeps one running
(``storetorrent up``), and network namespaces for several hosts on one
machine (:mod:`~st_py.deploy.netns`).
"""
