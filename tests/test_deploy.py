"""Running StoreTorrent as system services (docs/deployment.md): st-peer and
the tracker from TOML config files, the samples and systemd units of
deploy/, and the documentation of every tracker key."""

import configparser
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from st_py.core.capability import new_key_file
from st_py.deploy.cluster import Daemon
from st_py.wire.tracker_client import TrackerClient

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
TRACKER = [sys.executable, "-m", "st_py.tracker"]
STORETORRENT = str(Path(sys.executable).parent / "storetorrent")  # the CLI's console script


def toml_str(p) -> str:
    return json.dumps(str(p))  # a TOML basic string


def help_flags(argv: list[str]) -> set[str]:
    out = subprocess.run([*argv, "--help"], capture_output=True, text=True, check=True, timeout=60).stdout
    return set(re.findall(r"(?m)^\s{2}(--[a-z][a-z0-9-]*)", out))


def test_peer_starts_from_a_config_file_and_flags_override_it(make_cluster, peer_bin, tmp_path):
    cluster = make_cluster(1)
    data = tmp_path / "peer-from-config"
    config = tmp_path / "peer.toml"
    config.write_text(f"""# as in deploy/peer.toml
data = {toml_str(data)}
host = "127.0.0.1"
port = {cluster.tracker_port}   # taken by the tracker: --port 0 on the command line wins
namespace = {toml_str(cluster.namespace)}
tracker = {toml_str(cluster.tracker_addr)}
announce_interval = 0.3
key-file = {toml_str(cluster.key_file)}
metrics-port = 0
max-connections = 64
scrub-age = 7200.5
capacity = "1G"
sync = true
""")
    peer = Daemon(
        "peer-config", [peer_bin, "--config", str(config), "--port", "0"], tmp_path / "logs" / "peer-config.log"
    )
    try:
        assert peer.addr.startswith("127.0.0.1:") and not peer.addr.endswith(f":{cluster.tracker_port}")
        assert peer.metrics_addr is not None  # metrics-port from the file
        assert (data / "PEER_ID").is_file()
        cluster.wait_for_peers(2)  # it announces to the tracker of the file, with its key
        c = cluster.client()
        with c.create("/deploy/x2", replication="x2") as f:
            for i in range(10):
                f.put(f"r{i}", bytes([i]) * 100)
        assert sum(1 for p in data.rglob("*@*") if p.is_file()) == 10  # one copy of each on this peer
        with c.open("/deploy/x2") as f:
            assert f.get("r7") == bytes([7]) * 100
        log = peer.log_path.read_text()
        assert "(sync" in log and "--max-connections 64" in log
    finally:
        peer.stop()


@pytest.mark.parametrize(
    "text, message",
    [
        ('data = "/d"\nport = "7100"\n', "{path}:2: key 'port' must be an integer, not a string"),
        ('data = "/d"\nprot = 7100\n', "{path}:2: unknown key 'prot'"),
        ('data = "/d"\nport = 70000\n', "{path}:2: port = 70000: expected a port number 0..65535"),
        ('data = "/d"\nsync = "yes"\n', "{path}:2: key 'sync' must be true or false, not a string"),
        ('data = "/d"\nmint-token = true\n', "key 'mint-token' is not allowed in a config file"),
        ('data = "/d"\nport = \n', "{path}:2:"),
    ],
)
def test_peer_config_errors_name_the_file_line_and_key(peer_bin, tmp_path, text, message):
    path = tmp_path / "peer.toml"
    path.write_text(text)
    r = subprocess.run([peer_bin, "--config", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message.format(path=path) in r.stderr, r.stderr


def test_tracker_starts_from_a_config_file(tmp_path):
    state = tmp_path / "state"
    config = tmp_path / "tracker.toml"
    config.write_text(f"""root = {toml_str(tmp_path / "ns")}
state-dir = {toml_str(state)}
host = "127.0.0.1"
port = 1                 # not allowed: the command line's --port 0 wins
announce_interval = 0.5
misses = 4
log_level = "WARNING"
reservation-lease = 60
""")
    tracker = Daemon("tracker", [*TRACKER, "--config", str(config), "--port", "0"], tmp_path / "tracker.log")
    try:
        t = TrackerClient(tracker.addr, timeout=10)
        try:
            st = t.status()
            assert st.files == 0 and st.liveness_window_s == pytest.approx(0.5 * 4)
        finally:
            t.close()
        assert (state / "tracker.db").is_file() and (tmp_path / "ns").is_dir()
        assert "INFO" not in tracker.log_path.read_text()  # log_level from the file
    finally:
        tracker.stop()


@pytest.mark.parametrize(
    "text, message",
    [
        ('root = "/ns"\nport = "7000"\n', "key 'port' must be an integer, not a string"),
        ('root = "/ns"\nport = true\n', "key 'port' must be an integer, not a boolean"),
        ('root = "/ns"\nannounce-interval = "2s"\n', "key 'announce-interval' must be a number, not a string"),
        ('root = "/ns"\nkey_file = 5\n', "key 'key_file' must be a string, not an integer"),
        ('root = "/ns"\nlog-format = "xml"\n', "key 'log-format' is 'xml'; it must be one of text, json"),
        ('root = "/ns"\nprot = 7000\n', "unknown key 'prot'"),
        ('root = "/ns"\nkey_file = "/a"\nkey-file = "/b"\n', "sets --key-file, which"),
        ('root = "/ns"\nconfig = "/other.toml"\n', "key 'config' is not allowed in a config file"),
        ('root = "/ns"\nport = \n', "cannot read --config"),
    ],
)
def test_tracker_config_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "tracker.toml"
    path.write_text(text)
    r = subprocess.run([*TRACKER, "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr and str(path) in r.stderr, r.stderr


def test_every_tracker_key_is_documented():
    doc = (REPO / "docs" / "deployment.md").read_text()
    section = doc.split("### The tracker's config file", 1)[1].split("\n## ", 1)[0]
    for flag in help_flags(TRACKER) - {"--help", "--config"}:
        assert f"| `{flag[2:]}` |" in section, f"{flag} is not documented in docs/deployment.md"


def test_the_samples_in_deploy_are_valid(peer_bin, tmp_path):
    # every key of the tracker's sample (--help stops after the file is checked)
    r = subprocess.run(
        [*TRACKER, "--config", str(DEPLOY / "tracker.toml"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    # every key of the peer's sample, checked by the real binary (--mint-token
    # parses the whole file, then needs only the key)
    key = new_key_file(tmp_path / "secret.key")
    r = subprocess.run(
        [peer_bin, "--config", str(DEPLOY / "peer.toml"), "--key-file", str(key), "--mint-token", "--ops", "read"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0 and re.fullmatch(r"[0-9a-f]+\n", r.stdout), r.stderr


def read_unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    unit.read(DEPLOY / name)
    return unit


def read_toml(name: str) -> dict:
    import tomllib

    return tomllib.loads((DEPLOY / name).read_text())


@pytest.mark.parametrize(
    "name, sample", [("storetorrent-peer.service", "peer.toml"), ("storetorrent-tracker.service", "tracker.toml")]
)
def test_systemd_units_run_the_samples_hardened(peer_bin, name, sample):
    unit = read_unit(name)
    s = unit["Service"]
    assert s["Restart"] == "on-failure"
    assert s["User"] == s["Group"] == "storetorrent"  # a dedicated account, never root
    assert s["ProtectSystem"] == "strict" and s["NoNewPrivileges"] == "yes"
    assert s["CapabilityBoundingSet"] == "" and s["PrivateTmp"] == "yes" and s["ProtectHome"] == "yes"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    conf = read_toml(sample)
    writable = s["ReadWritePaths"].split()
    # ExecStart: the installed program, with flags it has, and the sample's path under /etc/storetorrent
    argv = shlex.split(s["ExecStart"])
    assert argv[0].startswith("/opt/storetorrent/venv/bin/")
    assert argv[argv.index("--config") + 1] == f"/etc/storetorrent/{sample}"
    mounts = unit["Unit"]["RequiresMountsFor"].split()  # never started on an unmounted namespace
    if name == "storetorrent-peer.service":
        assert Path(argv[0]).name == "st-peer"
        flags = help_flags([peer_bin])
        rest = argv[1:]
        assert conf["data"] in writable  # the record store is writable in the sandbox
        assert conf["namespace"] in mounts and conf["data"] in mounts
        need = 2 * conf["max-connections"] + 256
        assert int(s["LimitNOFILE"]) >= need
    else:
        assert argv[1:3] == ["-m", "st_py.tracker"]
        flags = help_flags(TRACKER)
        rest = argv[3:]
        for key in ("root", "state-dir"):
            assert any(Path(conf[key]).is_relative_to(w) for w in writable), key
            assert conf[key] in mounts, key
        assert int(s["LimitNOFILE"]) >= 4096
    used = [a.split("=", 1)[0] for a in rest if a.startswith("--")]
    assert used and set(used) <= flags, set(used) - flags


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed on this machine (the units are only parsed)",
)
@pytest.mark.parametrize(
    "name", ["storetorrent-peer.service", "storetorrent-tracker.service", "storetorrent-repair.service"]
)
def test_systemd_units_pass_systemd_analyze_verify(peer_bin, tmp_path, name):
    # systemd-analyze checks that ExecStart's program exists: point it at this machine's install
    text = (DEPLOY / name).read_text()
    prog = {
        "storetorrent-peer.service": peer_bin,
        "storetorrent-tracker.service": sys.executable,
        "storetorrent-repair.service": STORETORRENT,
    }[name]
    text = re.sub(r"/opt/storetorrent/venv/bin/\S+", prog, text)
    unit = tmp_path / name
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    r = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True, text=True, timeout=60
    )
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    assert level and float(level.group(1)) <= 2.0, r.stdout[-2000:]


def test_repair_unit_runs_the_repair_service_hardened():
    """deploy/storetorrent-repair.service: `storetorrent repair --watch`
    with flags it has, its environment from deploy/repair.env (the variables
    the CLI reads), the namespace of tracker.toml mounted first."""
    unit = read_unit("storetorrent-repair.service")
    s = unit["Service"]
    assert s["Restart"] == "on-failure" and s["User"] == s["Group"] == "storetorrent"
    assert s["ProtectSystem"] == "strict" and s["NoNewPrivileges"] == "yes" and "ReadWritePaths" not in s
    assert s["CapabilityBoundingSet"] == "" and s["PrivateTmp"] == "yes" and s["ProtectHome"] == "yes"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert "storetorrent-tracker.service" in unit["Unit"]["After"].split()
    assert read_toml("tracker.toml")["root"] in unit["Unit"]["RequiresMountsFor"].split()
    argv = shlex.split(s["ExecStart"])
    assert argv[0] == "/opt/storetorrent/venv/bin/storetorrent" and argv[1:3] == ["repair", "--watch"]
    used = {a.split("=", 1)[0] for a in argv[2:] if a.startswith("--")}
    flags = help_flags([STORETORRENT, "repair"])
    assert used <= flags, used - flags
    assert {"--watch", "--failed-after", "--interval", "--poll"} <= flags
    assert s["EnvironmentFile"] == "/etc/storetorrent/repair.env"
    env = {}
    for line in (DEPLOY / "repair.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value
    assert env["STORETORRENT_TRACKER"].endswith(f":{read_toml('tracker.toml')['port']}")
    assert set(env) <= {
        "STORETORRENT_TRACKER",
        "STORETORRENT_TLS_CA",
        "STORETORRENT_TLS_CERT",
        "STORETORRENT_TLS_KEY",
        "STORETORRENT_API_KEY",
    }


def test_announce_interval_is_set_in_one_place(make_cluster, peer_bin, tmp_path):
    """The tracker's --announce-interval is the cluster's: the peer's sample
    sets none, and a peer started with another interval announces at the
    tracker's (its reply says when to announce next), so it stays live
    within the tracker's liveness window."""
    assert "announce-interval" not in read_toml("peer.toml")
    assert read_toml("tracker.toml")["announce-interval"] > 0
    cluster = make_cluster(1, announce_interval=0.3)  # liveness window 0.9 s
    peer = Daemon(
        "peer-slow",
        [
            peer_bin,
            "--data",
            str(tmp_path / "slow"),
            "--port",
            "0",
            "--namespace",
            str(cluster.namespace),
            "--tracker",
            cluster.tracker_addr,
            "--announce-interval",
            "30",
            *(["--key-file", str(cluster.key_file)] if cluster.auth else []),
        ],
        tmp_path / "logs" / "peer-slow.log",
    )
    try:
        cluster.wait_for_peers(2)
        t = TrackerClient(cluster.tracker_addr, timeout=10, tls=cluster.client_tls)
        try:
            for _ in range(12):  # 3.6 s: four liveness windows, a tenth of the peer's own interval
                time.sleep(0.3)
                p = next(p for p in t.status().peers if p.addr == peer.addr)
                assert p.alive and p.last_announce_age_s < 0.9, p
        finally:
            t.close()
    finally:
        peer.stop()
