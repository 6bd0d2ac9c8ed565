"""The ``storetorrent`` commands this package adds (entry-point group
``storetorrent.commands``, found by :mod:`st_py.core.extras`): ``sql``, ``s3``."""

from __future__ import annotations

import click

from st_py.cli.app import as_of_opt, as_of_value, data_opt, format_opt, tracker_address, tracker_opt
from st_py.cli.render import emit, say
from st_py.client.object_stream import STRIPES_AHEAD


@click.command()
@tracker_opt
@data_opt
@click.argument("query")
@click.option("--file", "files", multiple=True, required=True, help="StoreTorrent file (repeatable)")
@format_opt
@as_of_opt
def sql(tracker, data, query, files, fmt, as_of) -> None:
    """Run DuckDB SQL QUERY over the infofiles of --file FILE ... (views:
    records, copies, files) and, when the query names it, over the records'
    contents (view records_data: local reads where GET_LOCAL reveals them,
    GET elsewhere). With --as-of, every view holds each file as it was
    (docs/snapshots.md); the generations read are printed on stderr."""
    from st_py.client.client import Client

    from .duckdb_sql import connect_files

    client = Client(tracker_address(tracker, data))
    if as_of is None:
        from .duckdb_sql import sql as run_sql

        emit(run_sql(client, list(files), query).to_pylist(), fmt)
        return
    con = connect_files(client, list(files), data="records_data" in query.lower(), as_of=as_of_value(as_of))
    try:
        table = con.execute(query).fetch_arrow_table()
        generations = con.execute("SELECT file, generation FROM files ORDER BY file").fetchall()
    finally:
        con.close()
    for file, generation in generations:  # provenance: what the result was computed on
        say(f"{file} as of generation {generation}", err=True)
    emit(table.to_pylist(), fmt)


@click.command()
@tracker_opt
@data_opt
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=9000, show_default=True, type=int, help="port to listen on (0: a free one)")
@click.option(
    "--keys",
    "keys_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    envvar="STORETORRENT_S3_KEYS",
    help="access keys (TOML: [users] NAME = API key); none: development mode, nothing checked",
)
@click.option("--replication", default="x2", show_default=True, help="of the files PUTs create")
@click.option("--domain", default=None, help="also serve virtual-host-style requests to BUCKET.DOMAIN")
@click.option("--region", default="us-east-1", show_default=True, help="the region requests are signed for")
@click.option(
    "--upload-expiry-hours",
    default=24.0,
    show_default=True,
    type=float,
    help="abort multipart uploads untouched this many hours (0: never)",
)
@click.option(
    "--peer-data",
    "peer_data",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="data directory of a peer on this node (repeatable): its copies are read from disk, checked, not by GET",
)
@click.option(
    "--read-ahead",
    default=STRIPES_AHEAD,
    show_default=True,
    type=click.IntRange(min=1),
    help="stripes a GET of a striped object keeps in flight (1: one after another)",
)
@click.option(
    "--http",
    default=None,
    metavar="httptools|h11",
    help="the HTTP/1.1 parser: httptools (C, the default when installed) or h11 (pure Python)",
)
@click.option(
    "--metrics-port",
    default=None,
    type=int,
    help="serve Prometheus metrics (read counters) at http://HOST:PORT/metrics (0: a free port; default: none)",
)
def s3(
    tracker,
    data,
    host,
    port,
    keys_file,
    replication,
    domain,
    region,
    upload_expiry_hours,
    peer_data,
    read_ahead,
    http,
    metrics_port,
) -> None:
    """Serve the S3 API (path-style, SigV4) over the cluster's files and
    records until interrupted (docs/s3.md). Prints ``listening on
    HOST:PORT`` on stdout once it takes connections (what `storetorrent up`
    waits for), after ``metrics on HOST:PORT`` with --metrics-port."""
    from st_py.errors import InvalidOptionError

    from .s3.server import app_of, listen, make_server, protocol_of

    address = tracker_address(tracker, data)
    try:
        server = make_server(
            address,
            host,
            port,
            keys_file,
            replication,
            domain=domain,
            region=region,
            upload_expiry_s=upload_expiry_hours * 3600,
            peer_data=list(peer_data),
            read_ahead=read_ahead,
            http=http,
        )
    except InvalidOptionError as e:
        raise click.BadParameter(str(e), param_hint="--http") from None
    sock = listen(host, port)
    bound = sock.getsockname()[1]
    if metrics_port is not None:
        from .s3.metrics import serve_metrics

        _, mport = serve_metrics(app_of(server), host, metrics_port)
        click.echo(f"metrics on {host}:{mport}")
    say(f"S3 endpoint on http://{host}:{bound} over tracker {address}, HTTP by {protocol_of(server)}", err=True)
    click.echo(f"listening on {host}:{bound}")
    server.run(sockets=[sock])
