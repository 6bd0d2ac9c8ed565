"""``storetorrent``: the command line.

storetorrent up        a local cluster (tracker + N peers) until Ctrl-C
storetorrent demo      the main job on real data (st_tools registers it; st_py.core.extras)
storetorrent put       store local files as records
storetorrent get       fetch a record
storetorrent ls        list the namespace
storetorrent sql       DuckDB SQL over infofiles (st_integrations registers it)
storetorrent status    peers, liveness, space
storetorrent rm        delete a file, a record or an empty directory (-r: a tree)
storetorrent rebalance restore F copies after peers are lost for good;
                       --spread: even the fill after peers are added
storetorrent drain     move everything off a live peer, then retire it
storetorrent chmod     permission bits, group, owner of a file or directory
storetorrent user add  a user with an API key in the tracker's users file
storetorrent recover   rebuild a lost namespace from the peers' infofile mirrors
storetorrent snapshot  create, ls, delete: named generations of files (--as-of NAME)

The package: :mod:`~st_py.cli.app` (the command group, shared options, the
entry point :func:`main`), :mod:`~st_py.cli.render` (tables, JSON, CSV) and a
module per command group; each registers its commands on the group when
imported.
"""

from st_py.cli import access, maintenance, records, snapshots, status, up  # noqa: F401  (they register their commands)
from st_py.cli.app import cli, main

__all__ = ["cli", "main"]
