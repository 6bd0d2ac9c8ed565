"""The tracker's HTTP endpoint (``--metrics-port``): ``/metrics``
(Prometheus), ``/`` (the status page) and ``/status.json``.

A small HTTP/1.0 server on the tracker's own event loop (asyncio streams),
so pages are made where the tracker's state changes, without locks or
threads. One request per connection; GET and HEAD only.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

log = logging.getLogger("st.tracker")

READ_TIMEOUT_S = 10.0  # for a request's head
MAX_HEAD_LINES = 100
# The Prometheus text format, as the peers serve it (prometheus_client's
# generate_latest writes it, names escaped with underscores).
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Page = tuple[int, str, bytes]  # status, content type, body


class StatusHttp:
    """Serves ``render_metrics()`` at /metrics and ``status()`` (a dict) at
    / as HTML (``render_html``) and at /status.json."""

    def __init__(
        self, render_metrics: Callable[[], bytes], status: Callable[[], dict], render_html: Callable[[dict], str]
    ):
        self.routes: dict[str, Callable[[], Page]] = {
            "/metrics": lambda: (200, METRICS_TYPE, render_metrics()),
            "/": lambda: (200, "text/html; charset=utf-8", render_html(status()).encode()),
            "/status.json": lambda: (200, "application/json", json.dumps(status(), indent=1).encode() + b"\n"),
        }
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (``port`` 0 picks a free one)."""
        self.server = await asyncio.start_server(self._serve, host, port)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and wait for the server to close."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, path = await asyncio.wait_for(self._read_head(reader), READ_TIMEOUT_S)
            except (asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                await self._reply(writer, (400, "text/plain", b"bad request\n"), False)
                return
            path = path.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                page: Page = (405, "text/plain", b"only GET and HEAD\n")
            elif path in self.routes:
                try:
                    page = self.routes[path]()
                except Exception:
                    log.exception("status page %s failed", path)
                    page = (500, "text/plain", b"internal error (see the tracker's log)\n")
            else:
                page = (404, "text/plain", b"not found; try /, /status.json or /metrics\n")
            await self._reply(writer, page, method == "HEAD")
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str]:
        line = (await reader.readuntil(b"\n")).decode("latin-1").split()
        if len(line) != 3 or not line[2].startswith("HTTP/"):
            raise ValueError("not an HTTP request line")
        for _ in range(MAX_HEAD_LINES):  # headers: none needed
            if (await reader.readuntil(b"\n")).strip() == b"":
                return line[0], line[1]
        raise ValueError("too many header lines")

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, page: Page, head_only: bool) -> None:
        status, ctype, body = page
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            500: "Internal Server Error",
        }[status]
        writer.write(
            f"HTTP/1.0 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n".encode()
        )
        if not head_only:
            writer.write(body)
        await writer.drain()
