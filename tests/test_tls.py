"""gRPC over TLS to the tracker with a local CA made by the cluster (as
``storetorrent up --tls`` does), and mutual TLS where the client
certificate names the user (docs/security.md)."""

import getpass

import pytest

from st_py.errors import StoreTorrentError
from st_py.tracker.access import add_user


def test_tracker_over_tls_with_a_local_ca(make_cluster):
    cluster = make_cluster(3, tls=True)
    ca = cluster.tls_dir / "ca.pem"
    assert ca.exists() and (cluster.tls_dir / "ca.key").stat().st_mode & 0o077 == 0
    c = cluster.client()
    with c.create("/tls/a", replication="x2") as f:
        f.put("r", b"over tls")
    with c.open("/tls/a") as f:
        assert f.get("r") == b"over tls"
    assert c.status().alive_peers == 3  # the peers announce over TLS too
    # a plaintext client cannot talk to it
    with pytest.raises(StoreTorrentError):
        cluster.client(tls=(None, None, None), timeout=3).tracker.status(timeout=3)


def test_mutual_tls_names_the_user_by_certificate(make_cluster, tmp_path):
    me = getpass.getuser()
    users = tmp_path / "users.toml"
    add_user(users, me, ["lab"])  # the API key is not needed: the certificate is the credential
    cluster = make_cluster(2, mutual_tls=True, users_file=users)
    c = cluster.client()  # CA + this user's client certificate, no API key
    with c.create("/mtls/x", replication="x1") as f:
        f.put("r", b"mine")
        assert f.info.owner == me and f.info.group == "lab"
    # without a client certificate the handshake fails
    with pytest.raises(StoreTorrentError):
        cluster.client(tls=(str(cluster.tls_dir / "ca.pem"), None, None)).tracker.status(timeout=3)
    # a certificate whose user is not in the users file is refused
    peer_cert = (str(cluster.tls_dir / "ca.pem"), str(cluster.tls_dir / "peer.pem"), str(cluster.tls_dir / "peer.key"))
    with pytest.raises(StoreTorrentError, match="not in the users file"):
        cluster.client(tls=peer_cert).open("/mtls/x")
