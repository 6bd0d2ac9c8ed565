"""The endpoint's HTTP/1.1 protocol, and the one place that chooses it
(:func:`protocol_class`): uvicorn's httptools protocol (the C parser,
llhttp) when ``httptools`` is installed, else uvicorn's h11 one (pure
Python), each subclassed to answer a request it cannot parse with S3's
error document instead of uvicorn's plain text (docs/s3.md, "Errors"):
a request line and headers over :data:`MAX_HEAD_BYTES` still arriving are
``RequestHeaderSectionTooLarge``, anything else the parser refuses (a
malformed request line or header) is ``InvalidRequest``; both 400, and the
connection is closed, as uvicorn does. A request whose headers arrived
whole reaches the app, which applies S3's own limit
(:data:`.app.MAX_HEADER_BYTES`).

Thread safety: one protocol instance per connection, on the server's event
loop; :func:`protocol_class` from any thread.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import uuid

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from st_py.errors import InvalidOptionError

from . import xml
from .errors import S3Error

MAX_HEAD_BYTES = 16 * 1024  # request line and headers buffered before giving up (h11's default)
HTTP_PROTOCOLS = ("httptools", "h11")  # the choices of `storetorrent s3 --http`, preferred first


def _refusal(too_large: bool) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of the 400 answering an unparsable request."""
    if too_large:
        err = S3Error(
            "RequestHeaderSectionTooLarge",
            f"your request's line and headers exceed the maximum allowed size ({MAX_HEAD_BYTES} bytes)",
        )
    else:
        err = S3Error("InvalidRequest", "the request is not valid HTTP/1.1 (its request line or a header)")
    body = xml.error_doc(err, uuid.uuid4().hex[:16].upper())
    headers = [
        (b"content-type", b"application/xml"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return headers, body


class S3H11Protocol(H11Protocol):
    """uvicorn's h11 protocol with S3's error XML for requests it cannot
    parse (pass as ``uvicorn.Config(http=...)`` with
    ``h11_max_incomplete_event_size=MAX_HEAD_BYTES``)."""

    NAME = "h11"

    def send_400_response(self, msg: str) -> None:
        """Answer an unparsable request with S3's ``<Error>`` (400) and close."""
        headers, body = _refusal(len(self.conn.trailing_data[0]) > MAX_HEAD_BYTES)
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body)):
            self.transport.write(self.conn.send(event))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()


COALESCE_BODY_BYTES = 64 * 1024  # a response body up to this size goes out in one write with its head


class _HeadCoalescer:
    """A connection's transport for uvicorn's httptools protocol that sends
    a response's head together with its body: uvicorn writes the status
    line and headers, then the body, each with its own ``send`` system call
    and TCP segment (and the client's reads to match). A write that is a
    final response's head (``HTTP/1.1 ...`` ending in a blank line; not a
    ``100 Continue``, which the client waits for before it sends a body)
    is held until the next write, which carries it (joined to a body of up
    to :data:`COALESCE_BODY_BYTES`; before a larger one, written alone),
    or until the event loop's next turn, whichever comes first, so a head
    is never held past the code that wrote it. Everything else is the
    transport's (docs/s3.md, "The request path").

    Thread safety: the event loop's, as the transport.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._t, self._loop = transport, loop
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        """Write ``data``, a response head held for the write after it."""
        head = self._head
        if head is not None:
            self._head = None
            if len(data) <= COALESCE_BODY_BYTES:
                data = head + data
            else:
                self._t.write(head)
        elif data[:5] == b"HTTP/" and data[9:10] != b"1" and data[-4:] == b"\r\n\r\n":  # not a 100 Continue
            self._head = data
            self._loop.call_soon(self.flush)
            return
        if data:
            self._t.write(data)

    def flush(self) -> None:
        """Write a head still held (the loop's next turn, or a close)."""
        head, self._head = self._head, None
        if head is not None and not self._t.is_closing():
            self._t.write(head)

    def close(self) -> None:
        """Flush, then close the transport."""
        self.flush()
        self._t.close()

    def __getattr__(self, name: str):
        return getattr(self._t, name)


@functools.cache
def _httptools_class() -> type[asyncio.Protocol]:
    """:class:`S3HttpToolsProtocol`, made on first use (it imports httptools)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class S3HttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with S3's error XML for requests it
        cannot parse, and the limit on a head still arriving that h11 has
        and llhttp lacks: the bytes received while a request's line and
        headers are incomplete are counted, and over :data:`MAX_HEAD_BYTES`
        the request is refused (a head that arrives whole is the app's to
        judge, as with h11)."""

        NAME = "httptools"

        _in_head = True  # between a message's end (or the connection's start) and its headers' end
        _head_bytes = 0  # bytes received while _in_head

        def connection_made(self, transport) -> None:  # type: ignore[override]
            """uvicorn's, over a transport that sends a head with its body (:class:`_HeadCoalescer`)."""
            super().connection_made(_HeadCoalescer(transport, self.loop))  # type: ignore[arg-type]

        def data_received(self, data: bytes) -> None:
            """Parse ``data``; refuse the request once its head outgrows the limit."""
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if self._in_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._refuse(True)

        def on_headers_complete(self) -> None:
            """The head is whole: its bytes are no longer counted."""
            self._in_head, self._head_bytes = False, 0
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            """The request is whole: what follows is the next one's head."""
            self._in_head = True
            super().on_message_complete()

        def send_400_response(self, msg: str) -> None:
            """Answer what llhttp refused with S3's ``<Error>`` (400) and close."""
            self._refuse(False)

        def _refuse(self, too_large: bool) -> None:
            headers, body = _refusal(too_large)
            out = [b"HTTP/1.1 400 Bad Request\r\n"]
            for name, value in [*self.server_state.default_headers, *headers]:
                out += [name, b": ", value, b"\r\n"]
            out += [b"\r\n", body]
            self.transport.write(b"".join(out))
            self.transport.close()

    return S3HttpToolsProtocol


def protocol_class(name: str | None = None) -> tuple[type[asyncio.Protocol], str]:
    """The endpoint's protocol class for ``uvicorn.Config(http=...)`` and
    its name: ``name`` one of :data:`HTTP_PROTOCOLS`, or None for the
    first of them that is installed (httptools, else h11).

    Raises
    ------
    InvalidOptionError
        ``name`` is unknown, or ``httptools`` is not installed.
    """
    if name is None:
        name = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    if name == "h11":
        return S3H11Protocol, name
    if name != "httptools":
        raise InvalidOptionError(
            f"unknown HTTP protocol {name!r}: one of {', '.join(HTTP_PROTOCOLS)}", option="http", value=name
        )
    if importlib.util.find_spec("httptools") is None:
        raise InvalidOptionError(
            "the httptools HTTP protocol needs the httptools package (pip install 'storetorrent[s3]'), "
            "or choose --http h11",
            option="http",
            value=name,
        )
    return _httptools_class(), name
