"""The CRC-32C of concatenated pieces from the pieces' own CRC-32Cs and
sizes, with no byte read (zlib's ``crc32_combine``, Mark Adler's method,
for the Castagnoli polynomial): what an object made of committed records
(:func:`st_py.client.compose.compose`) carries as its whole CRC-32C.

A CRC is linear over GF(2): the CRC of A then B is the CRC of A carried
over ``len(B)`` zero bytes, XOR the CRC of B. Carrying over ``n`` zero
bytes is a 32x32 bit matrix, made by squaring the one-zero-bit operator;
the matrix of one ``n`` is kept (an upload's parts share one size), so each
further piece of that size costs 32 XORs.

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _times(mat: tuple[int, ...], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _square(mat: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_times(mat, mat[i]) for i in range(32))


@lru_cache(maxsize=64)
def _zeros(n: int) -> tuple[int, ...]:
    """The operator that carries a CRC register over ``n`` (> 0) zero bytes."""
    power = (POLY, *(1 << i for i in range(31)))  # one zero bit
    for _ in range(3):
        power = _square(power)  # one zero byte
    out: tuple[int, ...] | None = None
    while True:
        if n & 1:
            out = power if out is None else tuple(_times(power, x) for x in out)
        n >>= 1
        if not n:
            break
        power = _square(power)
    assert out is not None
    return out


def combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC-32C of A then B, from A's CRC-32C, B's and B's length in bytes."""
    if len_b <= 0:
        return crc_a
    return _times(_zeros(len_b), crc_a) ^ crc_b


def combine_all(pieces: Iterable[tuple[int, int]]) -> int:
    """The CRC-32C of the pieces ``(crc32c, size)`` one after another (0 for none)."""
    crc = 0
    for piece_crc, size in pieces:
        crc = combine(crc, piece_crc, size)
    return crc


__all__ = ["combine", "combine_all"]
