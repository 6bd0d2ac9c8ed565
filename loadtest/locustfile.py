"""A locust User that drives the StoreTorrent client library against a
running cluster: a mix of PUT, GET and GET_LOCAL, each reported as its own
request type with its latency and size.

Run against a cluster (the tracker address is locust's --host):

    locust -f loadtest/locustfile.py --headless -u 4 -r 4 -t 60s --host 127.0.0.1:7000

or let ``python -m loadtest`` start and stop a local cluster around it.
"""

from __future__ import annotations

import os
import random
import time
import uuid

from locust import User, constant, events, task

from st_py import Client
from st_py.errors import StFileExistsError

RECORD_SIZE = int(os.environ.get("ST_LOAD_RECORD_SIZE", 4096))
FILE = os.environ.get("ST_LOAD_FILE", "/loadtest/data")


@events.test_start.add_listener
def _create_file(environment, **_):
    try:
        Client(environment.host).create(FILE, replication="x2").close()
    except StFileExistsError:
        pass


class StoreTorrentUser(User):
    """One writer/reader. ``host`` is the tracker ``host:port``."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.client = Client(self.host, group_size=8)
        self.file = self.client.open(FILE)
        self.mine: list[str] = []
        self.payload = os.urandom(RECORD_SIZE)
        self.prefix = uuid.uuid4().hex[:8]

    def on_stop(self) -> None:
        self.file.close()
        self.client.close()

    def _fire(self, kind: str, name: str, t0: float, length: int, exc: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type=kind,
            name=name,
            response_time=(time.perf_counter() - t0) * 1000,
            response_length=length,
            exception=exc,
            context={},
        )

    @task(6)
    def put(self) -> None:
        name = f"{self.prefix}/{len(self.mine):08d}"
        t0, exc = time.perf_counter(), None
        try:
            self.file.put(name, self.payload)
            self.mine.append(name)
        except Exception as e:  # reported to locust as a failure
            exc = e
        self._fire("PUT", f"put {RECORD_SIZE} B x2", t0, RECORD_SIZE, exc)

    @task(6)
    def get(self) -> None:
        if not self.mine:
            return
        name = random.choice(self.mine)
        t0, exc, n = time.perf_counter(), None, 0
        try:
            n = len(self.file.get(name))  # flushes this user's pending commits first
            if n != RECORD_SIZE:
                raise AssertionError(f"GET {name} returned {n} bytes")
        except Exception as e:
            exc = e
        self._fire("GET", f"get {RECORD_SIZE} B", t0, n, exc)

    @task(1)
    def get_local(self) -> None:
        t0, exc, n = time.perf_counter(), None, 0
        try:
            n = len(self.file.get_local())
        except Exception as e:
            exc = e
        self._fire("GET_LOCAL", "get_local all peers", t0, n, exc)
