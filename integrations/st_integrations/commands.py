"""The ``storetorrent`` commands this package adds (entry-point group
``storetorrent.commands``, found by :mod:`st_py.core.extras`): ``sql``."""

from __future__ import annotations

import click

from st_py.cli.app import data_opt, format_opt, tracker_address, tracker_opt
from st_py.cli.render import emit


@click.command()
@tracker_opt
@data_opt
@click.argument("query")
@click.option("--file", "files", multiple=True, required=True, help="StoreTorrent file (repeatable)")
@format_opt
def sql(tracker, data, query, files, fmt) -> None:
    """Run DuckDB SQL QUERY over the infofiles of --file FILE ... (views:
    records, copies, files) and, when the query names it, over the records'
    contents (view records_data: local reads where GET_LOCAL reveals them,
    GET elsewhere)."""
    from st_py.client.client import Client

    from .duckdb_sql import sql as run_sql

    table = run_sql(Client(tracker_address(tracker, data)), list(files), query)
    emit(table.to_pylist(), fmt)
