"""Cutting a scan into read units (integrations/st_integrations/readplan.py):
the cut against the plain greedy rule it implements, and the units' Dask
tokens, which stand for their records without hashing every name."""

from __future__ import annotations

from dask.base import tokenize
from hypothesis import given, settings
from hypothesis import strategies as st

from st_integrations.readplan import FileRef, ReadUnit, _Columns, plan_scan, split


def _greedy(sizes: list[int], block: int) -> list[tuple[int, int]]:
    """The rule, record by record: add records while the unit stays within
    ``block`` bytes; a record larger than that is a unit of its own."""
    out, i = [], 0
    while i < len(sizes):
        j, held = i, 0
        while j < len(sizes) and not (j > i and held + sizes[j] > block):
            held += sizes[j]
            j += 1
        out.append((i, j))
        i = j
    return out


def _columns(sizes: list[int]) -> _Columns:
    cols = _Columns()
    names = [f"r{i:06d}" for i in range(len(sizes))]
    cols.add(FileRef("/f"), names, [f"/data/{n}" for n in names], sizes)
    return cols


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 1000), max_size=60), st.integers(1, 1500))
def test_the_cut_is_the_greedy_rule(sizes, block):
    units = split(_columns(sizes), "p:1", block, "k")
    bounds, at = [], 0
    for u in units:
        bounds.append((at, at + len(u)))
        at += len(u)
    assert bounds == _greedy(sizes, block)
    assert [n for u in units for n in u.names] == [f"r{i:06d}" for i in range(len(sizes))]


def test_keyed_tokens_are_distinct_and_a_selection_hashes_its_records():
    units = split(_columns([10] * 100), "p:1", 25, "scan")
    tokens = [tokenize(u) for u in units]
    assert len(units) == 50 and len(set(tokens)) == 50
    assert tokenize(split(_columns([10] * 100), "p:1", 25, "scan")[7]) == tokens[7]  # deterministic
    assert tokenize(split(_columns([10] * 100), "p:1", 25, "other")[7]) != tokens[7]
    picked = units[7].select([1])
    assert picked.key == "" and tokenize(picked) != tokens[7]
    assert tokenize(picked) == tokenize(ReadUnit.of("p:1", picked.records))


def test_a_new_commit_gives_new_tokens(cluster):
    """The key holds the file's commit generation: after one more record the
    same cut of the same peers is another set of units."""
    c = cluster.client()
    with c.create("/t/f", "x2") as f:
        for i in range(40):
            f.queue_put(f"r{i:03d}", b"x" * 100)
    first = plan_scan(c, "/t/f", block_size=300)
    again = plan_scan(c, "/t/f", block_size=300)
    assert len(first.units) > 4
    assert [tokenize(u) for u in first.units] == [tokenize(u) for u in again.units]
    assert len({tokenize(u) for u in first.units}) == len(first.units)
    with c.open("/t/f") as f:
        f.put("r999", b"y" * 100)
    later = plan_scan(c, "/t/f", block_size=300)
    assert not {tokenize(u) for u in first.units} & {tokenize(u) for u in later.units}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1),
            st.integers(0, 2**40),
            st.integers(0, 2),
        ),
        max_size=30,
    ),
    st.sampled_from(["", "scan/p:1/0:3"]),
)
def test_a_unit_pickles_by_column_and_comes_back_equal(records, key):
    """Units travel to every read task (a Dask graph, a Ray task): pickled by
    column, any name (unicode, '/', '@') and size come back as they were,
    with the planner's key, and an object (no path) stays one."""
    import pickle

    import cloudpickle

    files = (FileRef("/a"), FileRef("/b", ("zstd",), 7, "k"), FileRef("/c"))
    unit = ReadUnit(
        "127.0.0.1:7100",
        files,
        tuple(f for _, _, f in records),
        tuple(n for n, _, _ in records),
        tuple("" if z % 5 == 0 else f"/data/{i:02x}/{n}@0@0000abcd" for i, (n, z, _) in enumerate(records)),
        tuple(z for _, z, _ in records),
        key,
    )
    for back in (pickle.loads(pickle.dumps(unit, protocol=5)), cloudpickle.loads(cloudpickle.dumps(unit))):
        assert back == unit and back.key == key and back.records == unit.records
        assert tokenize(back) == tokenize(unit)


def test_a_unit_with_names_decoded_with_surrogateescape_pickles():
    """LOCAL_LIST names are decoded with surrogateescape: a name that is not
    UTF-8 on disk is a str with lone surrogates, which must survive."""
    import pickle

    name = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")
    unit = ReadUnit("p:1", (FileRef("/f"),), (0,), (name,), (f"/d/{name}@0@00000000",), (3,))
    assert pickle.loads(pickle.dumps(unit)) == unit
    assert pickle.loads(pickle.dumps(ReadUnit("p:1"))) == ReadUnit("p:1")
