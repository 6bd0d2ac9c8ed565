"""Client-side filters (FreeLoader, seed 004 section 5.2.2; docs/filters.md):
a chain of transformations applied to a record's bytes before they leave the
client, and undone after they come back. Chosen per file at create and kept
in the infofile (``meta.filters``), so every reader and writer of the file
applies the same chain.

=============== ===================================================================
``zstd``        Zstandard compression (the ``zstandard`` package), level 3.
``aes-256-gcm`` authenticated encryption (the ``cryptography`` package): a
                random 96-bit nonce per record, the file id and record name as
                associated data (a copy moved to another name or file does not
                decrypt), stored as ``nonce || ciphertext || tag``.
=============== ===================================================================

Filters run in the order given when writing and in reverse when reading:
``["zstd", "aes-256-gcm"]`` compresses, then encrypts. The peers store, verify
(CRC-32C) and scrub the filtered bytes; they never see plaintext or a key.

The encryption key (32 bytes) never goes to the tracker. It comes from
``Client(encryption_key=...)``, the file named by ``$STORETORRENT_KEY_FILE``
(32 raw bytes, or 64 hex digits), or ``$STORETORRENT_ENCRYPTION_KEY`` (64 hex
digits). The infofile keeps only a check value derived from the key
(``meta.key_check``, an HMAC), so a wrong key is refused at once with
:class:`WrongKeyError` instead of producing garbage.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from st_py.errors import StoreTorrentError

FILTERS = ("zstd", "aes-256-gcm")
ZSTD_LEVEL = 3
KEY_BYTES = 32
NONCE_BYTES = 12


class FilterError(StoreTorrentError):
    """A filter could not be applied or undone.

    Attributes
    ----------
    file, record : str
        Where (empty when not about one record).
    filter : str
        Which filter.
    """

    def __init__(self, message: str, file: str = "", record: str = "", filter: str = ""):  # noqa: A002
        super().__init__(message)
        self.file, self.record, self.filter = file, record, filter


class MissingKeyError(FilterError):
    """The file is encrypted and no key was given."""


class WrongKeyError(FilterError):
    """The key given is not the file's key (its check value differs), or a
    record does not authenticate with it (tampered with, or written with
    another key)."""


def check_filters(names: Sequence[str]) -> list[str]:
    """The filter chain as a list, checked.

    Raises
    ------
    ~st_py.errors.BadNameError
        For an unknown filter or one given twice.
    """
    from st_py.errors import BadNameError

    out = [n.strip() for n in names if n.strip()]
    for n in out:
        if n not in FILTERS:
            raise BadNameError(f"unknown filter {n!r}: use {', '.join(FILTERS)} (docs/filters.md)")
    if len(set(out)) != len(out):
        raise BadNameError(f"filter chain {out} names a filter twice")
    return out


def load_key(key: bytes | str | os.PathLike | None = None) -> bytes | None:
    """The encryption key: ``key`` itself (32 bytes), the file it names, or
    from the environment (see the module docstring); None if none is set.

    Raises
    ------
    FilterError
        A key that is not 32 bytes (or 64 hex digits).
    """
    raw: bytes | None = None
    where = "the key given"
    if isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
    elif key is not None:
        where = str(key)
        raw = Path(key).read_bytes()
    elif os.environ.get("STORETORRENT_KEY_FILE"):
        where = os.environ["STORETORRENT_KEY_FILE"]
        raw = Path(where).read_bytes()
    elif os.environ.get("STORETORRENT_ENCRYPTION_KEY"):
        where, raw = "$STORETORRENT_ENCRYPTION_KEY", os.environ["STORETORRENT_ENCRYPTION_KEY"].encode()
    if raw is None:
        return None
    if len(raw) != KEY_BYTES:
        text = raw.strip()
        try:
            raw = bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raw = b""
    if len(raw) != KEY_BYTES:
        raise FilterError(
            f"the encryption key in {where} is not {KEY_BYTES} bytes (or {2 * KEY_BYTES} hex digits); "
            "make one with: python -c 'import os; print(os.urandom(32).hex())'",
            filter="aes-256-gcm",
        )
    return raw


def key_check(key: bytes) -> str:
    """A value that tells keys apart without revealing them (HMAC-SHA256)."""
    return hmac.new(key, b"storetorrent key check v1", hashlib.sha256).hexdigest()[:32]


class FilterChain:
    """The filters of one file. ``encode`` and ``decode`` are pure functions
    of (file id, record name, bytes).

    Thread safety: one chain may be shared by any number of threads (a
    Dask worker's or Ray actor's read tasks, an fsspec filesystem's readers,
    one :class:`~st_py.client.file.StFile` used from a thread pool). The zstd
    compressor and decompressor are not safe for concurrent use (the
    ``zstandard`` package's documentation: one per thread), so each thread
    gets its own on first use; AES-GCM (``cryptography``'s ``AESGCM``) is
    stateless and shared. ``tests/test_threads.py`` checks it.
    """

    def __init__(self, names: Sequence[str], key: bytes | None = None, file: str = "", expected_check: str = ""):
        self.names = check_filters(names)
        self.file = file
        self._aead = None
        self._zstd: threading.local | None = None  # per thread: .c compressor, .d decompressor
        if "aes-256-gcm" in self.names:
            if key is None:
                raise MissingKeyError(
                    f"file {file} is encrypted (filters {','.join(self.names)}): give its key with "
                    "Client(encryption_key=...), $STORETORRENT_KEY_FILE or $STORETORRENT_ENCRYPTION_KEY",
                    file=file,
                    filter="aes-256-gcm",
                )
            if expected_check and not hmac.compare_digest(key_check(key), expected_check):
                raise WrongKeyError(
                    f"the key given is not the key of {file} (key check {key_check(key)[:8]}..., "
                    f"the file's is {expected_check[:8]}...)",
                    file=file,
                    filter="aes-256-gcm",
                )
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(key)
        if "zstd" in self.names:
            import zstandard  # noqa: F401 (fails here, at open, when it is missing)

            self._zstd = threading.local()

    def _compressor(self):
        z = self._zstd
        c = getattr(z, "c", None)
        if c is None:
            import zstandard

            c = z.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL)  # type: ignore[union-attr]
        return c

    def _decompressor(self):
        z = self._zstd
        d = getattr(z, "d", None)
        if d is None:
            import zstandard

            d = z.d = zstandard.ZstdDecompressor()  # type: ignore[union-attr]
        return d

    def __bool__(self) -> bool:
        return bool(self.names)

    @staticmethod
    def _aad(file_id: int, name: str) -> bytes:
        return struct.pack("<Q", file_id) + name.encode("utf-8", "surrogateescape")

    def encode(self, file_id: int, name: str, data: bytes) -> bytes:
        """The bytes to store for record ``name``."""
        for f in self.names:
            if f == "zstd":
                data = self._compressor().compress(data)
            else:
                nonce = os.urandom(NONCE_BYTES)
                data = nonce + self._aead.encrypt(nonce, data, self._aad(file_id, name))  # type: ignore[union-attr]
        return data

    def decode(self, file_id: int, name: str, stored: bytes | memoryview) -> bytes:
        """The record's bytes from what was stored.

        Raises
        ------
        WrongKeyError
            The record does not authenticate with this key.
        FilterError
            Stored bytes that a filter cannot undo.
        """
        data = bytes(stored)
        for f in reversed(self.names):
            if f == "zstd":
                import zstandard

                try:
                    data = self._decompressor().decompress(data)
                except zstandard.ZstdError as e:
                    raise FilterError(
                        f"record {name!r} of {self.file}: not valid zstd data ({e})",
                        file=self.file,
                        record=name,
                        filter=f,
                    ) from None
            else:
                from cryptography.exceptions import InvalidTag

                if len(data) < NONCE_BYTES + 16:
                    raise FilterError(
                        f"record {name!r} of {self.file}: {len(data)} bytes are too few for "
                        "AES-256-GCM (nonce and tag)",
                        file=self.file,
                        record=name,
                        filter=f,
                    )
                try:
                    data = self._aead.decrypt(  # type: ignore[union-attr]
                        data[:NONCE_BYTES],
                        data[NONCE_BYTES:],
                        self._aad(file_id, name),
                    )
                except InvalidTag:
                    raise WrongKeyError(
                        f"record {name!r} of {self.file} does not decrypt with the key given: "
                        "another key, or the stored bytes were changed",
                        file=self.file,
                        record=name,
                        filter=f,
                    ) from None
        return data
