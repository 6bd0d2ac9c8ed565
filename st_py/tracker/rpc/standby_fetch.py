"""A standby's infofile port (issue 40; docs/metadata-log.md, "Copies from
standbys"): a standby with a namespace of its own (``--own-namespace``)
serves FetchInfofile from the infofiles it applies the log to while it
follows, so copies on clients are not all made by the leader.

The port is its own (``--fetch-port``), never the tracker address clients
dial for everything else: that address stays closed until the standby is
elected, so the clients' and peers' one channel over the tracker addresses
(``pick_first``, st_py/wire/targets.py) still connects only to the leader.
On this port FetchInfofile is the tracker's own handler (the rights checked
by the same code, st_py/tracker/rpc/fetch_rpc.py); every other RPC answers
UNAVAILABLE at once ("ask the leader"). A standby never sends a state older
than the one asked for: a request whose wanted log position it has not
applied, or whose reply would be older than the wanted generation or the
asker's own copy, is refused with FAILED_PRECONDITION and the trailer
``st-error: replica-behind`` before anything is sent; so is a file it does
not have (NOT_FOUND on the leader: not created here yet, or deleted: only
the leader tells which).

Not thread-safe: runs on the tracker's event loop.
"""

from __future__ import annotations

import logging

import grpc

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.errors import ERROR_KIND_KEY

log = logging.getLogger("st.tracker")

REPLICA_BEHIND = "replica-behind"  # ERROR_KIND_KEY of a standby's refusal of a state it has not got


def behind_by(head: pb.FetchInfofileChunk, req: pb.FetchInfofileRequest) -> str:
    """Why the reply that starts with ``head`` is older than ``req`` asks
    ("": it is not): below the wanted generation, below the wanted log
    position (same log), or below the asker's own copy (same log)."""
    if head.generation < req.want_generation:
        return f"generation {head.generation}, the copy needs {req.want_generation}"
    if req.want_log_id and head.log_id == req.want_log_id and head.position < req.want_position:
        return f"log position {head.position}, the copy needs {req.want_position}"
    if req.have_log_id and head.log_id == req.have_log_id and head.position < req.have_position:
        return f"log position {head.position}, older than the asker's copy ({req.have_position})"
    return ""


class StandbyFetch(pb_grpc.TrackerServicer):
    """The servicer of a standby's infofile port over ``service`` (the
    standby's TrackerService), reachable at ``addr``."""

    def __init__(self, service, addr: str):
        self.service, self.addr = service, addr

    async def FetchInfofile(self, request, context):
        """The tracker's FetchInfofile, refused (FAILED_PRECONDITION,
        ``st-error: replica-behind``) when this standby has not applied the
        log as far as ``request`` wants, or its reply would be older than the
        wanted generation or the asker's copy."""
        oplog = self.service.oplog
        if request.want_log_id and request.want_log_id == oplog.log_id and request.want_position > oplog.followed:
            # before anything is read: no file's state is told to a caller not yet checked
            await self._refuse(
                context,
                f"standby {self.addr} has applied the metadata log through entry {oplog.followed}; "
                f"the copy needs entry {request.want_position}",
            )
        # the rights checked as on the leader, by its code; its NOT_FOUND turned into "ask the leader"
        replies = self.service.FetchInfofile(request, _StandbyContext(context, self.addr))
        head = await replies.__anext__()
        why = behind_by(head, request)
        if why:
            await replies.aclose()
            await self._refuse(context, f"standby {self.addr} has {request.name or request.file_id} at {why}")
        yield head
        async for m in replies:
            yield m

    async def _refuse(self, context, why: str) -> None:
        log.debug("FetchInfofile refused: %s", why)
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{why}: ask another tracker replica or the leader",
            trailing_metadata=((ERROR_KIND_KEY, REPLICA_BEHIND),),
        )


class _StandbyContext:
    """The call's context as the tracker's FetchInfofile sees it on a
    standby: the same in all but ``abort`` of NOT_FOUND, which becomes the
    replica-behind refusal (a file this standby has not got may be one it
    has not applied yet)."""

    def __init__(self, context, addr: str):
        self._context, self._addr = context, addr

    def __getattr__(self, name: str):
        return getattr(self._context, name)

    async def abort(self, code, details: str = "", trailing_metadata=()):
        if code == grpc.StatusCode.NOT_FOUND:
            await self._context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"standby {self._addr}: {details} (not applied here yet, or deleted): ask another tracker "
                "replica or the leader",
                trailing_metadata=((ERROR_KIND_KEY, REPLICA_BEHIND),),
            )
        await self._context.abort(code, details, trailing_metadata)


async def _not_here(self, request, context):
    """Any RPC but FetchInfofile on a standby's infofile port."""
    await context.abort(
        grpc.StatusCode.UNAVAILABLE,
        f"{self.addr} is a standby tracker's infofile port (FetchInfofile only): send this to the leader, "
        "at the cluster's tracker addresses",
    )


for _m in pb.DESCRIPTOR.services_by_name["Tracker"].methods:
    if _m.name != "FetchInfofile":
        setattr(StandbyFetch, _m.name, _not_here)


async def start_fetch_port(service, host: str, port: int, credentials=None) -> tuple[grpc.aio.Server, int]:
    """Serve :class:`StandbyFetch` over ``service`` on ``host:port`` (0: a
    free port; ``credentials``: the tracker's TLS server credentials, None:
    plaintext). Returns the started server and the port bound.

    Raises SystemExit when it cannot listen there."""
    from st_py.wire.tls import SERVER_OPTIONS

    server = grpc.aio.server(options=SERVER_OPTIONS)
    if credentials is not None:
        bound = server.add_secure_port(f"{host}:{port}", credentials)
    else:
        bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise SystemExit(f"tracker: cannot serve FetchInfofile on {host}:{port} (--fetch-port)")
    pb_grpc.add_TrackerServicer_to_server(StandbyFetch(service, f"{host}:{bound}"), server)
    await server.start()
    return server, bound
