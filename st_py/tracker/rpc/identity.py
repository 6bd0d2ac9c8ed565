"""Who is asking and may they: users, peers' capabilities, internal calls.

A part of the tracker's gRPC servicer (proto/storetorrent/v1/tracker.proto),
composed in st_py/tracker/service.py (the master) and
st_py/tracker/file_tracker.py (a per-file tracker).
"""

from __future__ import annotations

import logging

import grpc

from st_py.core import capability, namespace
from st_py.core.capability import CapabilityError
from st_py.errors import ERROR_KIND_KEY, BadNameError

from ..access import AccessError, User
from ..shards import TRACKER_KEY, TRACKER_USER_PREFIX, WRONG_TRACKER, internal_user
from .parts import TrackerParts

log = logging.getLogger("st.tracker")

FILE_OPS = capability.READ | capability.WRITE | capability.DELETE
MAX_SCHEMA_BYTES = 1 << 20  # one record schema kept in an infofile (Arrow IPC)


class Identity(TrackerParts):
    """The servicer's part for who is asking, and whether they may (users, API
    keys, client certificates, PEER capabilities, calls vouched for by another
    tracker of this master; docs/security.md).

    Not thread-safe: runs on the tracker's event loop (see
    :class:`~st_py.tracker.service.TrackerService`)."""

    # -- who is asking, and may they ---------------------------------------------
    async def authenticate(self, context, claimed: str = "") -> User:
        """The user making the RPC of ``context``: the one another tracker
        of this master vouched for (routing.py), else the one its client
        certificate (mutual TLS) or API key names, else, in development mode
        (no users file), ``claimed`` (the request's ``user`` field). Aborts
        the RPC with UNAUTHENTICATED when a users file is in force and none
        of them names a known user, or a vouching token is bad
        (docs/security.md)."""
        try:  # a call another tracker of this master made for a user it authenticated (routing.py)
            vouched = self._vouched(context)
        except capability.CapabilityError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"internal call refused: {e}")
        cert_names = [n.decode() for n in (context.peer_identities() or [])] if self.mutual_tls else []
        try:
            if vouched is not None:
                if vouched.startswith(TRACKER_USER_PREFIX):  # another tracker of the cluster (bootstrap.py)
                    return User(vouched, admin=True)
                return self.users.lookup(vouched)
            return self.users.authenticate(context.invocation_metadata(), claimed, cert_names[:1])
        except AccessError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        raise AssertionError("unreachable: context.abort raises")

    async def _allowed(self, context, check, *args):
        """Run a Guard check; an AccessError aborts the RPC with its reason."""
        try:
            return check(*args)
        except AccessError as e:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if e.code == "quota" else grpc.StatusCode.PERMISSION_DENIED
            await context.abort(code, str(e))

    async def _peer_token(self, context) -> None:
        """Announces must carry a PEER capability when a key is configured."""
        if self.key is None:
            return
        token = dict(context.invocation_metadata() or ()).get("x-st-capability", "")
        try:
            cap = capability.verify(self.key, bytes.fromhex(token))
            if not cap.allows(capability.PEER):
                raise capability.CapabilityError("the capability does not allow PEER")
        except (ValueError, capability.CapabilityError) as e:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"announce refused: {e}; peers announce with a PEER capability signed "
                "with the tracker's key (st-peer --key-file)",
            )

    async def _fetching_peer(self, context, claimed: str) -> str:
        """The peer id of a FetchInfofile made by a peer (``claimed``, the
        request's user, is "peer:<peer_id>"), or "" for a user's. With a key
        the peer must show a PEER capability (as its announces do; aborts
        UNAUTHENTICATED otherwise) and its id is the one the capability names;
        without a key, the claim is taken only in development mode (no users
        file, where users are taken at their word too)."""
        if not claimed.startswith("peer:"):
            return ""
        if self.key is not None:
            await self._peer_token(context)  # aborts without a PEER capability
            token = dict(context.invocation_metadata() or ()).get("x-st-capability", "")
            named = capability.verify(self.key, bytes.fromhex(token)).user
            if not named.startswith("peer:"):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "the PEER capability names no peer")
            return named.removeprefix("peer:")
        if not self.users.enabled:
            return claimed.removeprefix("peer:")
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            "a peer fetches infofiles with a PEER capability: start the tracker and its peers with a key "
            "(--key-file, docs/capabilities.md)",
        )
        raise AssertionError("unreachable: context.abort raises")

    async def _name(self, context, name: str) -> str:
        try:
            return namespace.normalize(name)
        except BadNameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        raise AssertionError("unreachable: context.abort raises")

    async def _search_allowed(self, context, user: User, name: str) -> None:
        """Refuse (PERMISSION_DENIED) a user who may not search the
        directories down to ``name`` (as Open does)."""
        await self._allowed(context, self.guard.check_search, user, name)

    # -- calls between the trackers of one master (paper 3.5, routing.py) --------
    def _vouched(self, context) -> str | None:
        """The user another tracker of this master made the call for (None:
        not such a call). Raises CapabilityError for a bad internal token."""
        return internal_user(self.internal_key, context.invocation_metadata())

    async def _internal_only(self, context) -> str:
        """Refuse an internal RPC that does not come from a tracker of this
        master; returns who the call says it is made for."""
        try:
            who = self._vouched(context)
        except CapabilityError as e:
            who, why = None, str(e)
        else:
            why = "it carries no TRACKER capability"
        if who is None:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, f"this RPC is only for the trackers of one master: {why}"
            )
        return who  # type: ignore[return-value]

    async def _wrong_tracker(self, context, name: str, master: str) -> None:
        """Refuse a request for a file this tracker does not write."""
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"this tracker does not take the writes of {name} (it is another tracker's); "
            f"open the file again through the master {master}",
            trailing_metadata=((ERROR_KIND_KEY, WRONG_TRACKER), (TRACKER_KEY, master)),
        )
