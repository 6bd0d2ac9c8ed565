"""The history checker (tests/history.py) on made-up histories: a valid one
passes; a lost acknowledgement, a visible failed write, a resurrected
delete, a stale read, a changed snapshot, a create applied twice and two
leaders in one term each fail it. No processes."""

from __future__ import annotations

from history import FAIL, OK, UNKNOWN, Final, Op, check, check_creates_once, check_terms, median, resume_times

F = "/h/f"


def op(f, key="", value=None, t0=0.0, t1=0.1, outcome=OK, result=None, error="", file=F, process="w"):
    return Op(process, f, file, key, value, t0, t1, outcome, result, error)


def base() -> list[Op]:
    """create /h/f; put a, b; commit both; put c, whose commit is unknown."""
    return [
        op("create", t0=0.0, t1=0.1),
        op("put", "a", b"A", 0.2, 0.3),
        op("put", "b", b"B", 0.3, 0.4),
        op("commit", value=("a", "b"), t0=0.4, t1=0.5),
        op("put", "c", b"C", 0.6, 0.7),
        op("commit", value=("c",), t0=0.7, t1=0.9, outcome=UNKNOWN, error="TrackerUnavailableError: gone"),
    ]


def test_a_valid_history_passes_either_way_for_an_unknown_write():
    for final in ({F: {"a": b"A", "b": b"B"}}, {F: {"a": b"A", "b": b"B", "c": b"C"}}):
        v = check(base(), Final(files=final))
        assert v.valid, v.problems
        assert v.acked == 2 and v.lost == 0


def test_a_lost_acknowledged_record_fails():
    v = check(base(), Final(files={F: {"a": b"A"}}))
    assert not v.valid and v.lost == 1
    assert any(p.startswith(f"LOST {F}:b") for p in v.problems), v.problems


def test_wrong_bytes_fail():
    v = check(base(), Final(files={F: {"a": b"A", "b": b"b"}}))
    assert any("other than the" in p for p in v.problems), v.problems


def test_a_definitely_failed_write_visible_fails():
    ops = base() + [
        op("put", "d", b"D", 1.0, 1.1),
        op("commit", value=("d",), t0=1.1, t1=1.2, outcome=FAIL, error="QuotaExceededError: full"),
    ]
    assert check(ops, Final(files={F: {"a": b"A", "b": b"B"}})).valid
    v = check(ops, Final(files={F: {"a": b"A", "b": b"B", "d": b"D"}}))
    assert any("failed definitely" in p for p in v.problems), v.problems


def test_a_record_never_put_visible_fails():
    v = check(base(), Final(files={F: {"a": b"A", "b": b"B", "z": b"Z"}}))
    assert any("no one put it" in p for p in v.problems), v.problems
    v = check(base(), Final(files={F: {"a": b"A", "b": b"B"}, "/h/other": {}}))
    assert any("no one created it" in p for p in v.problems), v.problems


def test_deleted_stays_deleted_an_unknown_delete_either_way():
    ops = base() + [op("delete", "a", t0=1.0, t1=1.1), op("delete", "b", t0=1.2, t1=1.3, outcome=UNKNOWN)]
    assert check(ops, Final(files={F: {}})).valid
    assert check(ops, Final(files={F: {"b": b"B"}})).valid
    v = check(ops, Final(files={F: {"a": b"A", "b": b"B"}}))
    assert any("a delete of it returned" in p for p in v.problems), v.problems


def test_reads_must_see_what_was_acknowledged_before_them():
    final = Final(files={F: {"a": b"A", "b": b"B"}})
    concurrent = op("get", "a", t0=0.45, t1=0.46, result=None, process="r")  # during the commit: either
    later = op("get", "a", t0=0.6, t1=0.61, result=None, process="r")
    assert check(base() + [concurrent], final).valid
    v = check(base() + [later], final)
    assert any(p.startswith("stale read") for p in v.problems), v.problems
    listed = op("list", t0=0.6, t1=0.61, result=frozenset({"a"}), process="r")
    v = check(base() + [listed], final)
    assert any("misses b" in p for p in v.problems), v.problems
    early = op("get", "c", t0=0.1, t1=0.2, result=b"C", process="r")  # before c's put was invoked
    v = check(base() + [early], final)
    assert any("which no one had put" in p for p in v.problems), v.problems


def test_a_snapshot_must_read_at_the_end_as_it_read_when_taken():
    ops = base() + [op("snapshot", "s1", t0=0.6, t1=0.65, result=frozenset({"a", "b"}), process="r")]
    files = {F: {"a": b"A", "b": b"B"}}
    assert check(ops, Final(files, {(F, "s1"): {"a": b"A", "b": b"B"}})).valid
    v = check(ops, Final(files, {(F, "s1"): {"a": b"A"}}))
    assert any("s1 changed" in p for p in v.problems), v.problems
    v = check(ops, Final(files, {}))
    assert any("cannot be read at the end" in p for p in v.problems), v.problems
    short = base() + [op("snapshot", "s2", t0=0.6, t1=0.65, result=frozenset({"a"}), process="r")]
    v = check(short, Final(files, {(F, "s2"): {"a": b"A"}}))
    assert any("misses b" in p for p in v.problems), v.problems


def test_a_create_applied_twice_fails():
    ops = [op("create", t0=0.0, t1=0.1, outcome=FAIL, error="StFileExistsError: /h/f exists")]
    v = check(ops, Final(files={F: {}}))
    assert any("a create applied twice" in p for p in v.problems), v.problems


def test_two_leaders_in_one_term_fail():
    claims = [("a:1", 5), ("b:2", 9)]
    assert check_terms(claims, [(1, 5), (2, 5), (3, 9)]) == []
    assert any("two leaders in term 9" in p for p in check_terms(claims + [("a:1", 9)], []))
    assert any("a deposed leader" in p for p in check_terms(claims, [(1, 5), (2, 9), (3, 5)]))
    assert any("no tracker says" in p for p in check_terms(claims, [(1, 7)]))
    holders = {5: "a:1", 9: "b:2"}
    assert check_terms(claims, [(1, 5), (3, 9)], holders) == []
    assert any("etcd gave that term to b:2" in p for p in check_terms([("a:1", 9)], [], holders))
    assert any("a term etcd gave no one" in p for p in check_terms(claims + [("c:3", 7)], [(4, 7)], holders))


def test_a_file_made_twice_in_the_log_fails():
    ops = [(1, "create_file", "/a"), (2, "create_file", "/b"), (3, "delete_file", "/a"), (4, "create_file", "/a")]
    assert check_creates_once(ops) == []
    assert check_creates_once(ops + [(5, "create_file", "/b")], failed=[5]) == []
    assert check_creates_once(ops + [(5, "create_file", "/b")]) == [
        "/b created twice in the log: entries 2 and 5, no delete between"
    ]


def test_resume_times_and_median():
    ops = [op("commit", value=(), t0=t, t1=t + 0.1) for t in (0.0, 1.0, 5.0, 5.5)]
    assert resume_times(ops, [0.5, 4.0, 9.0])[:2] == [1.1 - 0.5, 5.1 - 4.0]
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([1.0, 2.0]) == 1.5
