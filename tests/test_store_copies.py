"""StFile.store_copies (st_py/client/copies.py), the write half of rebalance,
repair and spread/drain, against a scripted transport: what each PUT
carries, when a copy fails over, and what comes back. The three callers run
against real peers in test_rebalance.py, test_repair_service.py and
test_spread_drain.py."""

from collections import deque
from types import SimpleNamespace

import pytest

from st_py.client.copies import Copies, CopyOutcome, CopyToStore
from st_py.core.infofile import RecordMeta
from st_py.errors import PeerError, PeerUnavailableError, StoreTorrentError
from st_py.wire.protocol import FLAG_REPLACE, ErrorCode, put_prefix


class ScriptedTransport:
    """Each peer (``addr``) answers every PUT alike: ``ok``, ``refuse`` (the
    connection, at once, as Transport.send does), ``error`` (an error reply)
    or ``odd`` (a failure that is not the peer's)."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.queue: deque = deque()
        self.failed: dict[str, str] = {}

    def send(self, addr, build, callback):
        prefix, body = build(1)
        self.sent.append((addr, bytes(prefix), bytes(body)))
        if self.answers[addr] == "refuse":
            self.failed.setdefault(addr, "refused")
            callback(None, PeerUnavailableError(addr, "refused"))
        else:
            self.queue.append((addr, callback))

    def send_put(self, addr, file_id, copy_rank, crc, name, data, flags, callback):
        self.send(addr, lambda seq: [put_prefix(seq, file_id, copy_rank, crc, name, len(data), flags), data], callback)

    def wait(self, done):
        while not done():
            addr, callback = self.queue.popleft()
            answer = self.answers[addr]
            exc = {
                "ok": None,
                "error": PeerError(ErrorCode.NO_SPACE, "disk full", addr, 1),
                "odd": ValueError("not the peer's"),
            }[answer]
            callback(None, exc)


class Handle:
    """A scripted open file: the :class:`st_py.client.copies.CopyTarget` a
    :class:`Copies` stores through."""

    def __init__(self, answers: dict[int, str]):
        self.file_id = 5
        self.peers = {i: SimpleNamespace(addr=f"peer{i}:1") for i in answers}
        self._transport = ScriptedTransport({f"peer{i}:1": a for i, a in answers.items()})
        self.closed = False
        self.renewals = 0

    def check_open(self):
        if self.closed:
            raise StoreTorrentError("closed")

    @property
    def transport(self):
        return self._transport

    def addr(self, idx: int) -> str:
        return self.peers[idx].addr

    def renew_capability(self):
        self.renewals += 1

    def store_copies(self, copies, fail_over=None):
        return Copies(self).store_copies(copies, fail_over)


VERSIONED = RecordMeta("rec", 3, 0xC0FFEE, (0, 1), (0, 1), stored_as=".st-version/l-1/rec")
PLAIN = RecordMeta("other", 4, 0xBEEF, (0, 1), (0, 1))


def test_each_copy_is_a_replace_put_under_the_stored_key_with_the_committed_crc():
    f = Handle({2: "ok", 3: "ok"})
    out = f.store_copies([CopyToStore(VERSIONED, 1, 2, b"abc"), CopyToStore(PLAIN, 0, 3, b"wxyz")])
    done = sorted((o.record.name, o.rank, o.peer, o.stored) for o in out)
    assert done == [("other", 0, 3, True), ("rec", 1, 2, True)]
    assert f._transport.sent == [
        ("peer2:1", put_prefix(1, 5, 1, 0xC0FFEE, b".st-version/l-1/rec", 3, FLAG_REPLACE), b"abc"),
        ("peer3:1", put_prefix(1, 5, 0, 0xBEEF, b"other", 4, FLAG_REPLACE), b"wxyz"),
    ]
    assert f.renewals == 1  # the capability is renewed first if it is due


def test_a_copy_whose_peer_fails_goes_where_fail_over_says_until_it_says_none():
    f = Handle({0: "refuse", 1: "error", 2: "ok", 3: "error"})
    asked: list[CopyOutcome] = []

    def fail_over(o: CopyOutcome) -> int | None:
        asked.append(o)
        return {0: 1, 1: 2}.get(o.peer) if o.record is VERSIONED else None

    out = f.store_copies(iter([CopyToStore(VERSIONED, 0, 0, b"abc"), CopyToStore(PLAIN, 1, 3, b"wxyz")]), fail_over)
    # the refused connection fails over at once, before the next copy is taken
    assert [a for a, _, _ in f._transport.sent] == ["peer0:1", "peer1:1", "peer3:1", "peer2:1"]
    assert [(o.peer, type(o.error)) for o in asked] == [(0, PeerUnavailableError), (1, PeerError), (3, PeerError)]
    assert all(o.peer_failed for o in asked)
    by_name = {o.record.name: o for o in out}
    assert by_name["rec"].stored and by_name["rec"].peer == 2
    given_up = by_name["other"]
    assert not given_up.stored and given_up.peer_failed and given_up.peer == 3
    assert isinstance(given_up.error, PeerError)


def test_a_failure_not_at_the_peer_is_not_failed_over_and_no_fail_over_gives_up():
    f = Handle({0: "odd", 1: "error"})
    out = f.store_copies([CopyToStore(PLAIN, 0, 0, b"a")], fail_over=lambda o: pytest.fail("not a peer failure"))
    assert len(out) == 1 and isinstance(out[0].error, ValueError) and not out[0].peer_failed
    out = f.store_copies([CopyToStore(PLAIN, 0, 1, b"a")])
    assert len(out) == 1 and out[0].peer_failed and out[0].peer == 1


def test_a_closed_handle_stores_nothing():
    f = Handle({0: "ok"})
    f.closed = True
    with pytest.raises(StoreTorrentError):
        f.store_copies([CopyToStore(PLAIN, 0, 0, b"a")])
    assert f._transport.sent == []
