

def test_names_an_older_file_holds_stay_readable(module_cluster, tmp_path):
    """Only puts are refused: an older file's ``../escape.txt``,
    ``/abs.txt`` and ``a//b`` are read and deleted as before, and
    ``get -r`` fetches every other record (item 4: one such name blocked
    the whole file), naming those it leaves out."""
    from helpers import rename_in_infofile

    c = module_cluster.client()
    legacy = {"tmp0": "../escape.txt", "tmp1": "/abs.txt", "tmp2": "a//b"}
    with c.create("/rules/legacy", replication="x2") as f:
        for t in legacy:
            f.put(t, legacy[t].encode())
        f.put("d/ok", b"ok")
    rename_in_infofile(module_cluster, "/rules/legacy", legacy)
    c = module_cluster.client()
    with c.open("/rules/legacy") as f:
        for n in legacy.values():
            assert f.get(n) == n.encode()
    out = tmp_path / "out"
    r = run_cli(module_cluster, "get", "/rules/legacy", "-r", "-o", str(out))
    assert r.returncode == 1 and "fetched 1 records" in r.stdout, r.stdout + r.stderr
    assert (out / "d" / "ok").read_bytes() == b"ok" and sorted(p.name for p in out.iterdir()) == ["d"]
    for n in legacy.values():
        assert n in r.stderr
    assert "3 of 4 records" in r.stderr
    with c.open("/rules/legacy") as f:
        f.delete("../escape.txt")
    assert names_of(module_cluster, "/rules/legacy") == ["/abs.txt", "a//b", "d/ok"]
