"""Answers of operations that may outlast a client's read timeout
(docs/s3.md, "Long operations"): CompleteMultipartUpload of a large
upload (its parts streamed into the object's stripes), CopyObject and
UploadPartCopy of a large source. S3 answers these as
:func:`answer_long` does: when the operation has not finished after
:data:`KEEPALIVE_S` seconds, it begins a 200 answer (the XML declaration)
and sends a space every :data:`KEEPALIVE_S` seconds until it has; the body
then ends with the result document, or with an ``<Error>`` document if the
operation failed. Clients read such an error as a failure, as S3's
documentation asks them to (botocore turns a 200 whose document is an
``<Error>`` into a 500 and retries it; DuckDB's httpfs retries it too),
and a client's read timeout (60 s in botocore) never fires while the
spaces come. An
operation that finishes sooner gets the usual answer: its status, its
headers, its document.

What such an answer cannot carry: headers known only at the end (the new
version's ``x-amz-version-id``; the result document has the ETag), and an
error's HTTP status (a client reads the ``<Error>``'s code).

Thread safety: called on the event loop, one answer per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from starlette.responses import Response, StreamingResponse

from . import xml

T = TypeVar("T")

log = logging.getLogger("storetorrent.s3")

# Seconds an operation runs before its answer begins with the spaces, and
# between two spaces (MinIO's 10 s; botocore's read timeout is 60 s).
KEEPALIVE_S = 10.0


async def answer_long(
    work: Awaitable[T], answer: Callable[[T], Response], error_doc: Callable[[BaseException], bytes]
) -> Response:
    """The answer of ``work`` (an operation running in a worker thread).

    Parameters
    ----------
    work : awaitable
        The operation.
    answer : callable
        Its result to the usual :class:`Response` (status 200, its headers,
        its XML document, which starts with :data:`.xml.HEAD`).
    error_doc : callable
        An exception of ``work`` to S3's ``<Error>`` document (the
        endpoint's own translation), for an answer already begun.

    Returns
    -------
    Response
        ``answer(result)`` if ``work`` ends within :data:`KEEPALIVE_S`
        seconds; else a streamed 200 of the declaration, a space every
        :data:`KEEPALIVE_S` seconds, then the result's document or the
        error's.

    Raises
    ------
    Exception
        What ``work`` raised within :data:`KEEPALIVE_S` seconds (the
        endpoint answers it with its own status).
    """
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieved)  # its error is answered, or its client gone: not "never retrieved"
    done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_S)
    if done:
        return answer(task.result())
    return StreamingResponse(_spaces_then(task, answer, error_doc), status_code=200, media_type="application/xml")


def _retrieved(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


async def _spaces_then(
    task: asyncio.Future, answer: Callable[[T], Response], error_doc: Callable[[BaseException], bytes]
) -> AsyncIterator[bytes]:
    head = xml.HEAD.encode()
    yield head
    while True:
        done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_S)
        if done:
            break
        yield b" "
    exc = task.exception()
    if exc is None:
        body = bytes(answer(task.result()).body)
    else:
        log.info("S3 operation failed after its answer began: %s: %s", type(exc).__name__, exc)
        body = error_doc(exc)
    yield body[len(head) :] if body.startswith(head) else body


__all__ = ["KEEPALIVE_S", "answer_long"]
