"""S3's XML documents: the error document and the operations' results
(namespace ``http://s3.amazonaws.com/doc/2006-03-01/``), and the parsing of
DeleteObjects' request body.

Thread safety: pure functions.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

__all__ = ["escape"]  # also the app's, for text inside an element

from .errors import S3Error

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def iso_time(t: float) -> str:
    """``2026-11-29T01:02:03.000Z`` of unix seconds ``t``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def http_time(t: float) -> str:
    """``Sun, 29 Nov 2026 01:02:03 GMT`` of unix seconds ``t``."""
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(t))


def el(tag: str, value) -> str:
    """``<tag>value</tag>``, the value escaped."""
    return f"<{tag}>{escape(str(value))}</{tag}>"


def error_doc(e: S3Error, request_id: str) -> bytes:
    """S3's ``<Error>`` document of ``e``."""
    body = el("Code", e.code) + el("Message", e.message)
    if e.resource:
        body += el("Resource", e.resource)
    return (HEAD + "<Error>" + body + el("RequestId", request_id) + "</Error>").encode()


def doc(root: str, inner: str) -> bytes:
    """A result document ``<root xmlns=...>inner</root>``."""
    return (HEAD + f'<{root} xmlns="{NS}">' + inner + f"</{root}>").encode()


def list_buckets(buckets: list[tuple[str, float]], owner: str) -> bytes:
    """ListAllMyBucketsResult of ``(name, created unix s)``."""
    items = "".join("<Bucket>" + el("Name", n) + el("CreationDate", iso_time(t)) + "</Bucket>" for n, t in buckets)
    who = "<Owner>" + el("ID", owner) + el("DisplayName", owner) + "</Owner>"
    return doc("ListAllMyBucketsResult", who + "<Buckets>" + items + "</Buckets>")


def parse_delete(body: bytes) -> tuple[list[str], bool]:
    """``(keys, quiet)`` of a DeleteObjects request body.

    Raises
    ------
    S3Error
        ``MalformedXML``.
    """
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        raise S3Error("MalformedXML", "the XML you provided was not well-formed") from None

    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    keys, quiet = [], False
    for child in root:
        if local(child.tag) == "Quiet":
            quiet = (child.text or "").strip().lower() == "true"
        elif local(child.tag) == "Object":
            for sub in child:
                if local(sub.tag) == "Key":
                    keys.append(sub.text or "")
    if not keys or len(keys) > 1000:
        raise S3Error("MalformedXML", "DeleteObjects takes 1 to 1000 keys")
    return keys, quiet
