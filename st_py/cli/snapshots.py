"""``storetorrent snapshot create|ls|delete``: named generations of files
(docs/snapshots.md)."""

from __future__ import annotations

import datetime

import click

from st_py.cli.app import cli, data_opt, format_opt, tracker_address, tracker_opt
from st_py.cli.render import emit, say


@cli.group()
def snapshot() -> None:
    """Snapshots: a file's committed state kept readable by name (--as-of NAME)."""


def _rows(snaps) -> list[dict]:
    return [
        {
            "file": s.file,
            "name": s.name,
            "generation": s.generation,
            "created": datetime.datetime.fromtimestamp(s.created_at, datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "owner": s.owner,
        }
        for s in snaps
    ]


@snapshot.command("create")
@tracker_opt
@data_opt
@click.argument("path")
@click.option("--name", "name", required=True, help="the snapshot's name (unique per file)")
@format_opt
def create(tracker, data, path, name, fmt) -> None:
    """Snapshot file PATH, or every file below folder PATH: each keeps its
    committed generation readable as NAME (O(1); consistent per file)."""
    from st_py.client.client import Client

    made = Client(tracker_address(tracker, data)).snapshot(path, name)
    if fmt == "table":
        for s in made:
            say(f"snapshot {s.name} of {s.file}: generation {s.generation}")
        return
    emit(_rows(made), fmt)


@snapshot.command("ls")
@tracker_opt
@data_opt
@click.argument("path", default="/")
@format_opt
def ls(tracker, data, path, fmt) -> None:
    """The snapshots of file PATH, or of every file below folder PATH."""
    from st_py.client.client import Client

    emit(_rows(Client(tracker_address(tracker, data)).snapshots(path)), fmt, right=("generation",))


@snapshot.command("delete")
@tracker_opt
@data_opt
@click.argument("path")
@click.argument("name")
def delete(tracker, data, path, name) -> None:
    """Delete snapshot NAME of file PATH (or of every file below folder PATH
    that has one). What only it held is released: the peers' scrubbers
    reclaim the space (docs/snapshots.md, "Space")."""
    from st_py.client.client import Client

    for s in Client(tracker_address(tracker, data)).delete_snapshot(path, name):
        say(f"deleted snapshot {s.name} of {s.file} (generation {s.generation})")
