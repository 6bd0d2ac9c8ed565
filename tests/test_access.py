"""Who may do what (docs/security.md) against a real tracker with a users
file: API keys, UNIX owner/group/mode on files and directories, capabilities
limited to what the mode allows, per-user quotas checked before data moves,
and announces only from peers."""

import grpc
import pytest

from st_py._proto import tracker_pb2 as pb
from st_py._proto import tracker_pb2_grpc as pb_grpc
from st_py.core import capability as cap
from st_py.errors import NotAuthenticatedError, PermissionDeniedError, QuotaExceededError


@pytest.fixture
def site(make_site):
    cluster, clients, _ = make_site(
        3,
        alice=(["physics"], {"quota_bytes": 2_000_000}),
        bob=(["physics"], {}),
        carol=(["chemistry"], {}),
        root=(["admin"], {"admin": True}),
    )
    return cluster, clients


def stored_copies(cluster) -> int:
    return sum(1 for p in (cluster.data_dir / "peers").rglob("*@*") if p.is_file())


def test_api_keys_are_required_and_checked(site):
    cluster, clients = site
    with pytest.raises(NotAuthenticatedError, match="STORETORRENT_API_KEY"):
        cluster.client().create("/x/nokey")
    with pytest.raises(NotAuthenticatedError, match="unknown API key"):
        cluster.client(api_key="st_forged").open("/x/nokey")
    assert cluster.client().status().alive_peers == 3  # cluster status stays open


def test_modes_decide_who_gets_which_capability(site):
    cluster, c = site
    with c["alice"].create("/alice/run1", replication="x2", mode=0o640) as f:
        f.put("a", b"alice's data")
        assert f.info.owner == "alice" and f.info.group == "physics"
        assert f.info.capability_ops == cap.READ | cap.WRITE | cap.DELETE
    # bob is in the group: read only, and his writes stop before any data moves
    g = c["bob"].open("/alice/run1")
    assert g.info.capability_ops == cap.READ and "may not write" in g.info.write_denied
    assert g.get("a") == b"alice's data"
    before = stored_copies(cluster)
    with pytest.raises(PermissionDeniedError, match="may not write /alice/run1"):
        g.put("b", b"bob's")
    with pytest.raises(PermissionDeniedError):
        g.delete("a")
    assert stored_copies(cluster) == before
    # and the peers agree: his READ token cannot PUT
    assert not cap.parse(g.info.capability).allows(cap.WRITE)
    g.close()
    # carol may not even open it: no read token for her
    with pytest.raises(PermissionDeniedError, match="carol may not open /alice/run1"):
        c["carol"].open("/alice/run1")
    # directories: /alice is alice's (rwxr-xr-x): others cannot create or delete in it
    with pytest.raises(PermissionDeniedError, match="create entries in directory /alice"):
        c["bob"].create("/alice/bobs")
    with pytest.raises(PermissionDeniedError, match="delete entries in directory /alice"):
        c["bob"].delete("/alice/run1")
    # chmod by the owner opens it up; bob can now write
    with pytest.raises(PermissionDeniedError, match="only the owner"):
        c["bob"].chmod("/alice/run1", 0o666)
    assert c["alice"].chmod("/alice/run1", 0o664).mode == 0o664
    with c["bob"].open("/alice/run1") as g:
        g.put("b", b"bob's")
    with c["carol"].open("/alice/run1") as g:
        assert g.get("b") == b"bob's"  # others: r--
    # an admin may do anything, including giving the file away
    assert c["root"].chmod("/alice/run1", owner="bob").owner == "bob"
    with pytest.raises(PermissionDeniedError):
        c["carol"].chmod("/alice", 0o777)
    c["alice"].chmod("/alice", 0o700)
    with pytest.raises(PermissionDeniedError, match="search directory /alice"):
        c["bob"].open("/alice/run1")
    entries = {e.name: e for e in c["root"].ls("/")}
    assert entries["/alice"].owner == "alice" and entries["/alice"].mode == 0o700


def test_quota_is_checked_before_data_moves(site):
    cluster, c = site
    with pytest.raises(QuotaExceededError, match="2,000,000-byte quota"):
        c["alice"].create("/q/big", replication="x2", est_size=1_500_000)  # x2: 3 MB
    f = c["alice"].create("/q/fill", replication="x2")
    for i in range(10):
        f.put(f"r{i}", b"z" * 100_000)  # 2.0 MB stored with both copies: the whole quota
    f.close()
    with pytest.raises(QuotaExceededError):
        with c["alice"].create("/q/over", replication="x2") as g:
            for i in range(10):
                g.put(f"r{i}", b"z" * 100_000)
    # once over, no WRITE capability at all: refused before sending anything
    g = c["alice"].open("/q/fill")
    assert "quota" in g.info.write_denied and not g.info.capability_ops & cap.WRITE
    before = stored_copies(cluster)
    with pytest.raises(QuotaExceededError, match="quota"):
        g.put("more", b"x")
    g.close()
    assert stored_copies(cluster) == before
    # deleting frees quota again
    c["alice"].delete("/q/fill")
    with c["alice"].create("/q/again", replication="x1") as h:
        h.put("ok", b"fits")


def test_announces_need_a_peer_capability(site):
    cluster, _ = site
    stub = pb_grpc.TrackerStub(grpc.insecure_channel(cluster.tracker_addr))
    req = pb.AnnounceRequest(peer_id="intruder", addr="10.0.0.1:1")
    with pytest.raises(grpc.RpcError) as e:
        stub.Announce(req, timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    forged = cap.mint(b"x" * 32, cap.PEER, 0, 60).hex()
    with pytest.raises(grpc.RpcError):
        stub.Announce(req, timeout=5, metadata=(("x-st-capability", forged),))
    ok = cluster.mint(cap.PEER).hex()
    stub.Announce(req, timeout=5, metadata=(("x-st-capability", ok),))  # the real peers do this


def test_cli_user_add_chmod_and_ls(make_cluster, tmp_path):
    import os
    import subprocess
    import sys

    users = tmp_path / "users.toml"
    cli = [sys.executable, "-m", "st_py.cli"]
    out = subprocess.run(
        [*cli, "user", "add", "dana", "--users", str(users), "--group", "bio"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = out.strip().splitlines()[-1]
    assert key.startswith("st_") and key not in users.read_text()  # only the hash is kept
    assert (users.stat().st_mode & 0o777) == 0o600
    cluster = make_cluster(2, users_file=users)
    env = dict(os.environ, STORETORRENT_TRACKER=cluster.tracker_addr, STORETORRENT_API_KEY=key)
    cluster.client(api_key=key).create("/bio/x", replication="x1").close()
    run = lambda *a: subprocess.run([*cli, *a], capture_output=True, text=True, env=env)  # noqa: E731
    r = run("chmod", "600", "/bio/x")
    assert r.returncode == 0 and "600 dana:bio" in r.stdout, r.stdout + r.stderr
    r = run("ls", "/bio")
    assert "-rw-------" in r.stdout and "dana" in r.stdout, r.stdout
    r = subprocess.run(
        [*cli, "ls", "/bio"], capture_output=True, text=True, env=dict(env, STORETORRENT_API_KEY="st_wrong")
    )
    assert r.returncode != 0 and "unknown API key" in r.stdout + r.stderr


def test_only_admins_restore_infofiles_and_only_writers_take_the_writer_lease(site):
    cluster, c = site
    with c["alice"].create("/alice/lease", replication="x2", mode=0o640) as f:
        f.put("a", b"v0")
        name, file_id = f.name, f.file_id
    data = (cluster.namespace / "alice/lease").read_bytes()
    # RestoreInfofile (storetorrent recover --from-peers) writes the namespace: admins only
    with pytest.raises(PermissionDeniedError):
        c["alice"].tracker.restore_infofile(data)
    assert c["root"].tracker.restore_infofile(data).outcome == "present"
    # bob may read /alice/lease, not write it: no new versions, and no lease from the tracker
    g = c["bob"].open("/alice/lease")
    with pytest.raises(PermissionDeniedError):
        g.put("a", b"bob's version", replace=True)
    with pytest.raises(PermissionDeniedError):
        c["bob"].tracker.lease(name, file_id)
    g.close()
    with c["alice"].open("/alice/lease") as f:
        f.put("a", b"v1", replace=True)
    with c["bob"].open("/alice/lease") as g:
        assert g.get("a") == b"v1"
