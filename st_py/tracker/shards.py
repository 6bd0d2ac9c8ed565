"""Per-file trackers (paper 3.5: "the master tracker running at the
well-known address may spawn per-file trackers to handle metadata load for
one or more files. Clients are redirected to the appropriate tracker on
open"): which tracker takes a file's metadata writes, and how the trackers
vouch for the calls they make to each other.

A master started with ``--file-trackers N`` runs N per-file tracker
processes. File ``name`` belongs to shard :func:`shard_of` ``(name, N + 1)``:
shard 0 is the master's own, shard i > 0 per-file tracker i's. The hash is
of the name alone, so every process computes the same owner with no table
to share, and a file keeps its owner while it exists (a recreated file of
the same name has the same one). Changing N at a restart moves files; no
state is lost, since an owner keeps only caches besides the infofile, and a
client that meets the old owner re-opens through the master.
"""

from __future__ import annotations

import time
import zlib

from st_py.core import capability

INTERNAL_KEY = "x-st-internal"  # gRPC metadata: a TRACKER capability (hex) whose user the call is made for
INTERNAL_USER_KEY = "x-st-internal-user"  # without a key (development mode): the user's name, unsigned
TRACKER_KEY = "st-tracker"  # trailing metadata of a "wrong-tracker" refusal: where to go instead
WRONG_TRACKER = "wrong-tracker"  # st-error kind: this tracker does not take that file's writes
INTERNAL_TTL_S = 300.0


def shard_of(name: str, shards: int) -> int:
    """The shard of file ``name`` (a normalized namespace path) among
    ``shards`` (N + 1): 0 for the master, i for per-file tracker i.

    CRC-32 of the UTF-8 name modulo ``shards``: stable across processes,
    machines and Python versions (unlike ``hash()``), and even enough for
    a spread of a few trackers.
    """
    if shards <= 1:
        return 0
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) % shards


# The user another tracker of the cluster names itself as in its internal calls (a standby
# copying a replica's namespace, st_py/tracker/bootstrap.py): an admin, as only the holder
# of the cluster's key can mint its TRACKER capability (st_py/tracker/rpc/identity.py).
TRACKER_USER_PREFIX = "tracker:"


class InternalTokens:
    """TRACKER capabilities for calls made on a user's behalf, minted with
    the shared key and kept until half their lifetime is gone (one HMAC per
    user every couple of minutes, not per call). Without a key the user's
    name goes unsigned, as every call of a tracker in development mode."""

    def __init__(self, key: bytes | None, ttl_s: float = INTERNAL_TTL_S):
        self.key, self.ttl_s = key, ttl_s
        self._cache: dict[str, tuple[float, tuple[tuple[str, str], ...]]] = {}

    def metadata(self, user: str) -> tuple[tuple[str, str], ...]:
        """gRPC metadata vouching that a call is made for ``user``."""
        now = time.time()
        hit = self._cache.get(user)
        if hit is not None and hit[0] > now:
            return hit[1]
        if self.key is None:
            md: tuple[tuple[str, str], ...] = ((INTERNAL_USER_KEY, user),)
        else:
            md = ((INTERNAL_KEY, capability.mint(self.key, capability.TRACKER, 0, self.ttl_s, user, now).hex()),)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[user] = (now + self.ttl_s / 2, md)
        return md


_verified: dict[str, tuple[str, float]] = {}  # token -> (user, expires): each checked once


def internal_user(key: bytes | None, metadata) -> str | None:
    """The user a call from another tracker is made for, or None if the
    call does not come from one.

    Raises
    ------
    capability.CapabilityError
        The call carries a token that is forged, expired, malformed or not a
        TRACKER capability, or (with a key) an unsigned internal user name.
    """
    md = dict(metadata or ())
    token = md.get(INTERNAL_KEY)
    if token is None:
        if INTERNAL_USER_KEY not in md:
            return None
        if key is not None:
            raise capability.CapabilityError(
                "an internal call needs a TRACKER capability signed with the trackers' key"
            )
        return str(md[INTERNAL_USER_KEY])
    if key is None:
        raise capability.CapabilityError("this tracker has no key to check an internal capability with")
    hit = _verified.get(token)
    if hit is not None and hit[1] >= time.time():
        return hit[0]
    try:
        raw = bytes.fromhex(token)
    except ValueError:
        raise capability.CapabilityError("malformed internal capability: not hex") from None
    cap = capability.verify(key, raw)
    if not cap.allows(capability.TRACKER):
        raise capability.CapabilityError("the capability does not allow TRACKER")
    if len(_verified) > 4096:
        _verified.clear()
    _verified[token] = (cap.user, float(cap.expires))
    return cap.user
