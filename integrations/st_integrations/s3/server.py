"""Running the S3 endpoint: a uvicorn server around :class:`.app.S3App`.

Thread safety: :func:`make_server` may be called from any thread; the
server runs in the thread that calls its ``run()``.
"""

from __future__ import annotations

import logging
import socket

import uvicorn

from st_py.client.object_stream import STRIPES_AHEAD

from .app import UPLOAD_EXPIRY_S, S3App
from .auth import Keys
from .protocol import MAX_HEAD_BYTES, protocol_class

log = logging.getLogger("storetorrent.s3")

# Seconds an idle keep-alive connection stays open. uvicorn's default, 5 s, closed connections
# that SDKs (boto3's pool, s3fs) reuse after a pause of about that length, and a request sent as
# the server closed its connection failed with "Connection was closed before we received a valid
# response" (seen in CI); clients retry that only when they are set to retry. 75 s: nginx's default.
KEEP_ALIVE_S = 75


def make_server(
    tracker: str,
    host: str = "127.0.0.1",
    port: int = 9000,
    keys_file: str | None = None,
    replication: str = "x2",
    tls=(None, None, None),
    log_level: str = "warning",
    domain: str | None = None,
    region: str = "us-east-1",
    upload_expiry_s: float = UPLOAD_EXPIRY_S,
    peer_data: list[str] | tuple[str, ...] = (),
    read_ahead: int = STRIPES_AHEAD,
    http: str | None = None,
) -> uvicorn.Server:
    """A uvicorn server of the endpoint over ``tracker`` on ``host:port``
    (call ``run()``; ``should_exit = True`` stops it); ``domain``: also
    virtual-host-style requests to ``BUCKET.domain``; ``upload_expiry_s``:
    multipart uploads untouched this long are aborted (0: never);
    ``peer_data``: data directories of the peers on this node, whose copies
    are read from disk; ``read_ahead``: stripes a GET of a striped object
    keeps queued (:class:`.app.S3App`); ``http``: the HTTP/1.1 protocol,
    ``httptools`` or ``h11`` (None: httptools if installed,
    :func:`.protocol.protocol_class`), logged at INFO.

    Raises
    ------
    OSError, tomllib.TOMLDecodeError
        The keys file cannot be read.
    InvalidOptionError
        ``http`` is unknown or not installed.
    """
    protocol, http_name = protocol_class(http)
    app = S3App(tracker, Keys(keys_file, region), replication, tls, domain, upload_expiry_s, peer_data, read_ahead).app
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        http=protocol,  # S3's error XML for requests the parser refuses
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        access_log=False,  # no line per request (the endpoint's CPU per request: docs/s3.md, "The request path")
        proxy_headers=False,  # no client address is used: nothing to take from X-Forwarded-For
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    log.info("S3 endpoint HTTP protocol: %s", http_name)
    return uvicorn.Server(config)


def app_of(server: uvicorn.Server) -> S3App:
    """The :class:`.app.S3App` a server of :func:`make_server` serves (its
    :meth:`~.app.S3App.read_stats`, for :mod:`.metrics`)."""
    return server.config.app.state.s3  # type: ignore[union-attr]


def protocol_of(server: uvicorn.Server) -> str:
    """The name of the HTTP/1.1 protocol a server of :func:`make_server`
    runs: ``httptools`` or ``h11`` (:mod:`.protocol`)."""
    return server.config.http.NAME  # type: ignore[union-attr]


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) and listening,
    for :meth:`uvicorn.Server.run` (``sockets=[...]``): connections made
    before the server runs wait in its backlog, so the address can be
    announced as soon as this returns.

    Raises
    ------
    OSError
        The port is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock
