"""The placement rule as a planner sees it (st_py.core.history.Standings,
docs/snapshots.md, "Where a copy may go"): what it answers after planned
moves is what copy_standing answers once they are committed, for every
copy under a stored name, whichever version it belongs to."""

from __future__ import annotations

from collections import Counter

from st_py.core.history import ADOPT, LIVE, STALE, Standings

KEY = ".st-stripe/big.csv/00000000"
CRC, SIZE = 1234, 700


def test_a_peer_holding_the_same_bytes_at_the_same_rank_takes_the_copy():
    # a kept version and the current record share the stored name (a name put again with the
    # same bytes, whose peers answered OK): peer 0 holds both at rank 0, peer 1 the kept one
    # at rank 1, peer 2 the current one at rank 1
    st = Standings(
        {KEY: {0: Counter({(0, CRC, SIZE): 2}), 1: Counter({(1, CRC, SIZE): 1}), 2: Counter({(1, CRC, SIZE): 1})}},
        {},
        since=0.0,
    )
    assert st.of(KEY, 1, CRC, SIZE) == {0: LIVE, 1: ADOPT, 2: ADOPT}  # peer 0's file is rank 0's path
    assert st.of(KEY, 0, CRC, SIZE) == {0: ADOPT, 1: LIVE, 2: LIVE}
    assert st.of(KEY, 1, CRC + 1, SIZE) == {0: LIVE, 1: LIVE, 2: LIVE}  # other bytes: never over them
    assert st.of(KEY, 1) == {0: LIVE, 1: LIVE, 2: LIVE}  # bytes not said: refused


def test_planned_moves_are_seen_by_every_copy_under_the_stored_name():
    st = Standings({KEY: {0: Counter({(0, CRC, SIZE): 1}), 1: Counter({(0, CRC + 1, SIZE): 1})}}, {}, since=0.0)
    # the current record's copy (peer 1, other bytes) moves to peer 4: the kept version's
    # copy may no longer go to 4, and may go to 1 only as a last resort of another rank
    st.move(("current", 0), KEY, 0, 1, 4, CRC + 1, SIZE)
    assert st.of(KEY, 0, CRC, SIZE) == {0: ADOPT, 1: ADOPT, 4: LIVE}
    assert st.of(KEY, 1, CRC, SIZE) == {0: LIVE, 1: STALE, 4: LIVE}
    # moved again, it is one move from peer 1; moved back, none
    st.move(("current", 0), KEY, 0, 4, 3, CRC + 1, SIZE)
    assert st.of(KEY, 1, CRC, SIZE) == {0: LIVE, 1: STALE, 3: LIVE}
    st.move(("current", 0), KEY, 0, 3, 1, CRC + 1, SIZE)
    assert st.of(KEY, 1, CRC, SIZE) == {0: LIVE, 1: LIVE}


def test_a_moved_away_copy_counts_until_since():
    st = Standings({KEY: {}}, {KEY: {5: (10, 2, 100.0), 6: (11, 0, 50.0)}}, since=80.0)
    assert st.of(KEY, 2, CRC, SIZE) == {5: ADOPT}  # rank 0's old holder is past the window
    assert st.of(KEY, 0, CRC, SIZE) == {5: STALE, 6: ADOPT}


def test_a_version_put_again_shares_the_stored_name_only_if_every_rank_adopts():
    # a kept x3 version on peers 0, 1, 2 (ranks 0, 1, 2): a name put again with the same bytes
    # shares its stored name only on exactly those peers at those ranks (issue 43: it adopts them)
    st = Standings(
        {KEY: {p: Counter({(p, CRC, SIZE): 1}) for p in (0, 1, 2)}},
        {},
        since=0.0,
    )
    assert st.adopts_all(KEY, [0, 1, 2], CRC, SIZE)
    # rank 1 on peer 3: ranks 0 and 2 would meet the kept copies, rank 1 not. Shared, each
    # version's rank 0 could go only to the peer holding the other's rank 1 once peer 0 is lost
    # (LIVE there), so neither would be stored again: a name of its own
    assert not st.adopts_all(KEY, [0, 3, 2], CRC, SIZE)
    assert not st.adopts_all(KEY, [3, 4, 5], CRC, SIZE)  # meets none: a name of its own too
    assert not st.adopts_all(KEY, [0, 1, 2], CRC + 1, SIZE)  # other bytes
    assert not st.adopts_all(KEY, [1, 0, 2], CRC, SIZE)  # other ranks
    assert Standings({}, {}, since=0.0).adopts_all(KEY, [3, 4, 5], CRC, SIZE)  # nothing kept under it
    # the same met in part after a planned move: the kept rank 1 moved to peer 3 first
    st.move(("kept", 1), KEY, 1, 1, 3, CRC, SIZE)
    assert st.adopts_all(KEY, [0, 3, 2], CRC, SIZE)
    assert not st.adopts_all(KEY, [0, 1, 2], CRC, SIZE)


def test_a_copy_goes_first_where_the_same_file_already_is():
    # the kept version and the current record share the stored name, one file a peer: peer 0
    # rank 0, peer 1 rank 1, peer 2 rank 2; the current record's rank 1 moved from 1 to 3.
    # The kept version's rank 1 must follow it to 3: on peer 4 (free) it would leave rank 1
    # of the stored name on two peers, and a lost copy of either version no peer once only 3
    # peers are in service
    from st_py.maintenance.moves import admissible, together

    st = Standings({KEY: {p: Counter({(p, CRC, SIZE): 2}) for p in (0, 1, 2)}}, {}, since=0.0)
    st.move(("current", 1), KEY, 1, 1, 3, CRC, SIZE)
    rule = st.of(KEY, 1, CRC, SIZE)
    first, _ = admissible(rule, [3, 4])
    assert first == [3, 4] and together(rule, first) == [3]
    assert together(rule, [4]) == [4]  # none holds it: every candidate stays
