"""The endpoint's HTTP/1.1 protocol: uvicorn's h11 one, answering a
request it cannot parse with S3's error document instead of uvicorn's
plain text (docs/s3.md, "Errors"): request line and headers over
:data:`MAX_HEAD_BYTES` still arriving are ``RequestHeaderSectionTooLarge``,
anything else h11 refuses (a malformed request line or header) is
``InvalidRequest``; both 400, and the connection is closed, as uvicorn does.
A request whose headers arrived whole reaches the app, which applies S3's
own limit (:data:`.app.MAX_HEADER_BYTES`).

Thread safety: one instance per connection, on the server's event loop.
"""

from __future__ import annotations

import uuid

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import xml
from .errors import S3Error

MAX_HEAD_BYTES = 16 * 1024  # request line and headers h11 buffers before giving up (its default)


class S3H11Protocol(H11Protocol):
    """uvicorn's h11 protocol with S3's error XML for requests it cannot
    parse (pass as ``uvicorn.Config(http=...)`` with
    ``h11_max_incomplete_event_size=MAX_HEAD_BYTES``)."""

    def send_400_response(self, msg: str) -> None:
        """Answer an unparsable request with S3's ``<Error>`` (400) and close."""
        if len(self.conn.trailing_data[0]) > MAX_HEAD_BYTES:
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
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body)):
            self.transport.write(self.conn.send(event))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()
