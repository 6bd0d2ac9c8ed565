"""GET with failover (paper 3.6): the read side of an open file.

Reads the infofile for a record's copies, asks one holder at a time in
copy-rank order (never all at once, to avoid incast), verifies the CRC-32C
and falls back to the next copy on any error. A mixin of
:class:`st_py.file.StFile`, which holds the transport, the peerlist and the
pipeline depth shared with PUTs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Callable

from .errors import ChecksumError, RecordNotFoundError, RecordUnavailableError
from .protocol import crc32c, encode_get

if TYPE_CHECKING:
    from .file import Pending


class ReaderMixin:
    if TYPE_CHECKING:  # provided by StFile
        from .group_commit import GroupCommitter
        from .infofile import InfofileReader
        from .transport import Transport

        name: str
        file_id: int
        depth: int
        peers: dict
        _transport: Transport
        _committer: GroupCommitter
        _gets_inflight: int

        @property
        def inflight(self) -> int: ...
        def _infofile(self) -> InfofileReader: ...
        def _notify(self, name: str, callback, *args) -> None: ...
        def _usable(self, idx: int) -> bool: ...
        def _addr(self, idx: int) -> str: ...
        def _check_open(self) -> None: ...
        def _renew_capability(self) -> None: ...
        def poll(self, timeout: float = 0.0) -> int: ...
    def queue_get(self, name: str, callback: Callable[[str, bytes | None, Exception | None], None] | None = None
                  ) -> Pending:
        """Queue a GET of committed record ``name`` (paper 3.6).

        Reads the infofile for the copies, asks one peer at a time in copy-rank
        order (never all at once, to avoid incast), verifies the CRC-32C and
        falls back to the next copy on any error.

        Returns
        -------
        Pending
            ``result()`` is the record's bytes, or raises
            RecordNotFoundError / RecordUnavailableError.
        """
        self._check_open()
        self._renew_capability()
        if self._committer.busy:
            self._committer.drain()  # read your own writes
        from .file import Pending

        fut = Pending(self, name)  # type: ignore[arg-type]  # self is the StFile
        meta = self._infofile().lookup(name)
        if meta is None:
            exc = RecordNotFoundError(f"no committed record {name!r} in {self.name}")
            fut._set(exc=exc)
            if callback:
                self._notify(name, callback, name, None, exc)
            return fut
        while self.inflight >= self.depth:
            self.poll(0.05)
        self._gets_inflight += 1
        order = [i for i in meta.peers if self._usable(i)] + [i for i in meta.peers if not self._usable(i)]
        self._try_get(name, meta, order, [], fut, callback)
        self._transport.poll(0)
        return fut

    def _try_get(self, name, meta, order, reasons, fut, callback) -> None:
        if not order:
            self._gets_inflight -= 1
            exc = RecordUnavailableError(f"record {name!r}: every copy failed: " + "; ".join(reasons))
            fut._set(exc=exc)
            if callback:
                self._notify(name, callback, name, None, exc)
            return
        idx = order[0]
        addr = self._addr(idx) if idx in self.peers else f"peer#{idx}"

        def done(fr, exc):
            if exc is None:
                data = fr.fields["data"]
                actual = fr.fields.get("actual_crc32c")  # computed as it arrived (native receive path)
                if actual is None:
                    actual = crc32c(data)
                if fr.fields["crc32c"] != meta.crc32c or actual != meta.crc32c or len(data) != meta.size:
                    exc = ChecksumError(f"copy on {addr} does not match its CRC-32C")
            if exc is not None:
                reasons.append(f"{addr}: {exc}")
                self._try_get(name, meta, order[1:], reasons, fut, callback)
                return
            self._gets_inflight -= 1
            fut._set(data)
            if callback:
                self._notify(name, callback, name, data, None)

        self._transport.send(addr, lambda seq: [encode_get(seq, self.file_id, name.encode("utf-8", "surrogateescape"))],
                             done)

    def get(self, name: str) -> bytes:
        """The bytes of committed record ``name``.

        Raises
        ------
        RecordNotFoundError
            No committed record of that name.
        RecordUnavailableError
            Every copy failed (dead peers, CRC mismatch).
        """
        return self.queue_get(name).result()

    def names(self, prefix: str | None = None) -> list[str]:
        """Names of the committed records, sorted (from the infofile)."""
        return self._infofile().names(prefix)

    def __len__(self) -> int:
        return self._infofile().count()
