"""SeaweedFS beside StoreTorrent in the same run (issues 31, 41 and 42;
docs/benchmarks.md, "Side by side with weed benchmark" and "The S3
endpoint"): a ``weed`` binary found here is started on this machine in a
temporary folder and measured right after the StoreTorrent case of the same
shape, so the ratio compares two systems under the same load.

``weed`` is taken from ``ST_WEED_BIN``, else ``build/seaweedfs/weed``
(``scripts/get-seaweedfs.sh`` builds it from the Go module proxy in about 8
minutes), else ``PATH``; without one the SeaweedFS rows are left out and
nothing else changes. Every server listens on 127.0.0.1 on ports free at
start.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from st_py.deploy.ports import choose_ports

WEED_ENV = "ST_WEED_BIN"
_FIGURES = r" -+.*?Requests per second:\s+([\d.]+).*?Transfer rate:\s+([\d.]+)"
WRITE_RE = re.compile(r"-+ Writing Benchmark" + _FIGURES, re.S)
READ_RE = re.compile(r"-+ Randomly Reading Benchmark" + _FIGURES, re.S)


class SeaweedError(RuntimeError):
    """SeaweedFS did not start or its benchmark printed no figures (a bench
    tool's own failure: the message has the command and its output)."""


BUILT = Path(__file__).resolve().parent.parent / "build" / "seaweedfs" / "weed"  # scripts/get-seaweedfs.sh


def weed_bin() -> str | None:
    """The ``weed`` binary to measure (``ST_WEED_BIN``, else the one
    ``scripts/get-seaweedfs.sh`` built, else ``PATH``), or None."""
    path = os.environ.get(WEED_ENV) or (str(BUILT) if BUILT.exists() else None) or shutil.which("weed")
    return path if path and os.access(path, os.X_OK) else None


def _ports(n: int) -> list[int]:
    """``n`` free ports below the ephemeral range (st_py.deploy.ports), so no
    client connection of the run takes one while SeaweedFS starts."""
    return choose_ports([1] * n)


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SeaweedError(f"{proc.args} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SeaweedError(f"{url} did not answer within {timeout:.0f} s: {log.read_text()[-2000:]}")


class Seaweed:
    """A SeaweedFS of one master and ``volumes`` volume servers (with
    ``s3``, a filer and its S3 gateway too, at :attr:`s3_url`), its
    default ``replication`` SeaweedFS's (``000``: one copy; ``001``: two,
    on two volume servers), in a temporary folder under ``tmp``, stopped
    (SIGTERM, then SIGKILL) and removed on exit. Not thread-safe."""

    def __init__(self, tmp: Path, volumes: int = 1, s3: bool = False, replication: str = "000"):
        self.bin = weed_bin()
        if self.bin is None:
            raise SeaweedError(f"no weed binary: set {WEED_ENV} or put weed on PATH")
        self.dir = Path(tempfile.mkdtemp(prefix="seaweedfs-", dir=tmp))
        self.volumes, self.s3, self.replication = volumes, s3, replication
        self.procs: list[subprocess.Popen] = []
        self.master = self.master_arg = ""
        self.s3_url = ""

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen([self.bin, *args], stdout=out, stderr=subprocess.STDOUT, cwd=self.dir)
        self.procs.append(p)
        return p

    def __enter__(self) -> Seaweed:
        try:
            mp, mg = _ports(2)  # weed's default gRPC port is the HTTP port + 10000: given, never derived
            (self.dir / "m").mkdir()
            m = self._start(
                "master", "master", f"-mdir={self.dir / 'm'}", "-ip=127.0.0.1", f"-port={mp}", f"-port.grpc={mg}",
                "-volumeSizeLimitMB=1024", f"-defaultReplication={self.replication}",
            )  # fmt: skip
            self.master = f"127.0.0.1:{mp}"
            self.master_arg = f"{self.master}.{mg}"  # SeaweedFS's host:port.grpcport form
            _wait_http(f"http://{self.master}/cluster/status", m, self.dir / "master.log")
            ports = _ports(2 * self.volumes)
            for i in range(self.volumes):
                vp, vg = ports[2 * i], ports[2 * i + 1]
                (self.dir / f"v{i}").mkdir()
                v = self._start(
                    f"volume{i}", "volume", f"-dir={self.dir / f'v{i}'}", "-max=100", f"-mserver={self.master_arg}",
                    "-ip=127.0.0.1", f"-port={vp}", f"-port.grpc={vg}",
                )  # fmt: skip
                _wait_http(f"http://127.0.0.1:{vp}/status", v, self.dir / f"volume{i}.log")
            if self.s3:
                fp, fg, sp, sg = _ports(4)
                fl = self._start(
                    "filer", "filer", f"-master={self.master_arg}", "-ip=127.0.0.1", f"-port={fp}",
                    f"-port.grpc={fg}", f"-defaultReplicaPlacement={self.replication}",
                )  # fmt: skip
                _wait_http(f"http://127.0.0.1:{fp}/", fl, self.dir / "filer.log")
                gw = self._start(
                    "s3", "s3", f"-filer=127.0.0.1:{fp}.{fg}", "-ip.bind=127.0.0.1", f"-port={sp}",
                    f"-port.grpc={sg}", "-port.iceberg=0", "-port.lance=0",
                )  # fmt: skip
                self.s3_url = f"http://127.0.0.1:{sp}"
                self._grow(self.replication)
                _wait_http(f"{self.s3_url}/status", gw, self.dir / "s3.log")
            return self
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if not os.environ.get("ST_WEED_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def _grow(self, replication: str) -> None:
        """Volumes made before the timing starts (as a SeaweedFS in service
        has them): the master grows volumes on the first write otherwise,
        which held writes for seconds in the first runs here."""
        url = f"http://{self.master}/vol/grow?replication={replication}&count=4"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    r.read()
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise SeaweedError(f"{url}: {e}") from e
                time.sleep(0.5)

    def benchmark(self, n: int, size: int, concurrency: int = 16, replication: str = "000") -> dict[str, float]:
        """``weed benchmark -n n -size size -c concurrency -replication
        replication`` against this cluster: ``{"write_ops", "write_mbs",
        "read_ops", "read_mbs"}`` (its "Requests per second" and transfer
        rate in MB/s, written then read back in a random order). Raises
        SeaweedError when it prints no figures or reports failed requests."""
        self._grow(replication)
        cmd = [
            self.bin, "benchmark", f"-master={self.master_arg}", f"-n={n}", f"-size={size}", f"-c={concurrency}",
            f"-replication={replication}",
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=self.dir).stdout
        w, r = WRITE_RE.search(out), READ_RE.search(out)
        failed = [int(x) for x in re.findall(r"Failed requests:\s+(\d+)", out)]
        if w is None or r is None or any(failed):
            raise SeaweedError(f"{' '.join(cmd)}: no figures or failed requests ({failed}):\n{out[-3000:]}")
        kb = 1024 / 1e6
        return {
            "write_ops": float(w.group(1)),
            "write_mbs": float(w.group(2)) * kb,
            "read_ops": float(r.group(1)),
            "read_mbs": float(r.group(2)) * kb,
        }
