"""``storetorrent chmod`` and ``storetorrent user add``: permissions and users."""

from __future__ import annotations

from pathlib import Path

import click

from st_py.cli.app import cli, data_opt, tracker_address, tracker_opt
from st_py.cli.render import console


@cli.command()
@tracker_opt
@data_opt
@click.argument("mode")
@click.argument("path")
@click.option("--group", default="", help="new group (one of yours)")
@click.option("--owner", default="", help="new owner (admins only)")
def chmod(tracker, data, mode, path, group, owner) -> None:
    """Set the permission bits (octal MODE, e.g. 640; '-' keeps them) of a
    file or directory PATH, as UNIX does (docs/security.md)."""
    from st_py.client.client import Client

    try:
        bits = 0 if mode == "-" else int(mode, 8)
    except ValueError:
        raise click.BadParameter(f"{mode!r} is not an octal mode such as 640") from None
    r = Client(tracker_address(tracker, data)).chmod(path, bits, group, owner)
    console.print(f"{path}: {r.mode:o} {r.owner}:{r.group}")


@cli.group()
def user() -> None:
    """Manage the tracker's users file (API keys, groups, quotas)."""


@user.command("add")
@click.argument("name")
@click.option(
    "--users",
    "users_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="the tracker's users file (TOML); created if missing",
)
@click.option("--group", "groups", multiple=True, help="a group (repeat); the first owns new files")
@click.option("--quota-bytes", type=int, default=None, help="stored bytes, all copies")
@click.option("--admin", is_flag=True, help="may do anything")
def user_add(name, users_file, groups, quota_bytes, admin) -> None:
    """Add user NAME with a new API key, printed once (only its hash is kept).
    The tracker picks up the change at its next request."""
    from st_py.tracker.access import add_user

    try:
        key = add_user(Path(users_file), name, list(groups), quota_bytes, admin)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    console.print(f"user {name} added to {users_file}; give them this API key (shown once):")
    click.echo(key)
