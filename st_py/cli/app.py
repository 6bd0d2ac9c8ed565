"""The ``storetorrent`` command group, its shared options and the entry point.

Commands are registered by the modules of this package (one per command
group) and by other packages through the entry-point group
``storetorrent.commands`` (st_py.core.extras).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from st_py.cli.render import FORMATS, fail
from st_py.core import extras
from st_py.errors import StoreTorrentError

DATA_DEFAULT = "st-data"


def tracker_address(tracker: str | None, data: str) -> str:
    """The tracker to use: ``--tracker`` (or $STORETORRENT_TRACKER) if given,
    else the one of the local cluster under ``--data`` (its cluster file)."""
    if tracker:
        return tracker
    from st_py.wire.locate import read_cluster_file

    if os.environ.get("STORETORRENT_TRACKER"):
        return os.environ["STORETORRENT_TRACKER"]
    info = read_cluster_file(data)
    if info:
        for var, path in zip(
            ("STORETORRENT_TLS_CA", "STORETORRENT_TLS_CERT", "STORETORRENT_TLS_KEY"), info.get("tls") or ()
        ):
            if path:
                os.environ.setdefault(var, path)
        return info["tracker"]
    raise click.UsageError(
        "no tracker: pass --tracker HOST:PORT, set STORETORRENT_TRACKER, "
        f"or start a local cluster with `storetorrent up --data {data}`"
    )


format_opt = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people; json (a list of objects) or csv for scripts",
)


as_of_opt = click.option(
    "--as-of",
    "as_of",
    default=None,
    metavar="SNAPSHOT|GENERATION|TIME",
    help="read the file as it was: a snapshot's name, a generation, or an ISO 8601 time (docs/snapshots.md)",
)


def as_of_value(text: str | None):
    """``--as-of``'s text as ``as_of``: digits are a generation, anything
    else a snapshot name or an ISO 8601 time (the client tells which)."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


tracker_opt = click.option("--tracker", envvar="STORETORRENT_TRACKER", help="tracker HOST:PORT")
data_opt = click.option(
    "--data", default=DATA_DEFAULT, show_default=True, help="local cluster folder (to find its tracker)"
)


class _Commands(click.Group):
    """The commands of this module and those other packages register
    (entry-point group ``storetorrent.commands``: ``demo`` from st_tools,
    ``sql`` from st_integrations; st_py.core.extras), loaded when named."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(extras.names(extras.COMMANDS)))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is None and name in extras.names(extras.COMMANDS):
            cmd = extras.load(extras.COMMANDS, name)  # type: ignore[assignment]
        return cmd


@click.group(cls=_Commands)
@click.version_option(package_name="storetorrent", prog_name="storetorrent")
def cli() -> None:
    """StoreTorrent: distributed storage for datasets of many small records."""


def main() -> None:
    """The ``storetorrent`` entry point: runs :func:`cli`, printing a library
    error, a local OSError or a DuckDB SQL error as one line (exit status 2)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integrations"))
    try:
        cli(standalone_mode=True)
    except StoreTorrentError as e:
        fail(str(e))
    except OSError as e:  # a local path: -o into a missing folder, a file not readable ...
        fail(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    except Exception as e:
        duckdb = sys.modules.get("duckdb")
        if duckdb is not None and isinstance(e, duckdb.Error):  # a SQL mistake: DuckDB says what and where
            fail(f"SQL: {e}")
        raise
