"""A stateful property test of the client API against an in-memory model
(hypothesis ``RuleBasedStateMachine``), on a real tracker and real peers:
random put / put_object / replace (by a record or an object) / delete / get / get_local /
local_stripes / names, and peers SIGKILLed and restarted. After every step
the cluster answers as the model does: the same names, the same bytes by
GET, each record revealed exactly once by GET_LOCAL with its bytes, and
each stripe of each object exactly once by ``local_stripes``."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from conftest import poll_for
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from st_py.errors import RecordExistsError, RecordNotFoundError

NAMES = st.sampled_from(["a", "b", "c.csv", "dir/d", "dir/e f", "[x]"])
DATA = st.binary(min_size=0, max_size=3000)
STRIPE = 1000  # bytes: objects of up to 5 stripes


@pytest.mark.parametrize("protocol", ["client-sync", "chain"])
def test_client_api_never_diverges_from_the_model(make_cluster, protocol):
    cluster = make_cluster(4)
    client = cluster.client()
    counter = itertools.count()
    ran: Counter = Counter()  # rules run: the test must have exercised what it claims

    def alive() -> int:
        return client.status().alive_peers

    class ClusterModel(RuleBasedStateMachine):
        @initialize()
        def new_file(self):
            self.name = f"/model/{protocol}-{next(counter)}"
            self.model: dict[str, tuple[str, bytes]] = {}  # name -> ("record" | "object", bytes)
            self.down: tuple[int, int] | None = None  # (peer index, port) of the SIGKILLed peer
            client.create(self.name, replication="x2", protocol=protocol, blocksize=1).close()

        @rule(name=NAMES, data=DATA)
        def put(self, name, data):
            ran["put"] += 1
            with client.open(self.name) as f:
                if name in self.model:
                    with pytest.raises(RecordExistsError):
                        f.put(name, data)
                    return
                f.put(name, data)
            self.model[name] = ("record", data)

        @rule(name=NAMES, data=st.binary(min_size=1, max_size=5 * STRIPE))
        def put_object(self, name, data):
            ran["put_object"] += 1
            with client.open(self.name) as f:
                if name in self.model:
                    with pytest.raises(RecordExistsError):
                        f.put_object(name, data, stripe_size=STRIPE)
                    return
                f.put_object(name, data, stripe_size=STRIPE)
            self.model[name] = ("object", data)

        @rule(name=NAMES, data=DATA)
        def replace(self, name, data):
            ran["replace"] += 1
            with client.open(self.name) as f:
                f.put(name, data, replace=True)  # over a record or an object (docs/striping.md)
            self.model[name] = ("record", data)

        @rule(name=NAMES, data=st.binary(min_size=1, max_size=5 * STRIPE))
        def replace_object(self, name, data):
            ran["replace_object"] += 1
            with client.open(self.name) as f:
                f.put_object(name, data, stripe_size=STRIPE, replace=True)
            self.model[name] = ("object", data)

        @rule(name=NAMES)
        def delete(self, name):
            ran["delete"] += 1
            with client.open(self.name) as f:
                if name not in self.model:
                    with pytest.raises(RecordNotFoundError):
                        f.delete(name)
                    return
                f.delete(name)
            del self.model[name]

        @precondition(lambda self: self.down is None)
        @rule(i=st.integers(0, 3))
        def kill_peer(self, i):
            ran["kill_peer"] += 1
            addr = cluster.kill_peer(i)
            self.down = (i, int(addr.rsplit(":", 1)[1]))
            poll_for(lambda: alive() == 3, timeout=20, what="the tracker to fail the killed peer")

        @precondition(lambda self: self.down is not None)
        @rule()
        def restart_peer(self):
            ran["restart_peer"] += 1
            i, port = self.down
            cluster.start_peer(i, port)
            self.down = None
            cluster.wait_for_peers(4)

        @rule()
        def check(self):
            ran["check"] += 1
            with client.open(self.name) as f:
                assert f.names() == sorted(self.model)
                assert len(f) == len(self.model)
                for name, (_, data) in self.model.items():
                    assert f.get(name) == data, name
                records = {n: d for n, (k, d) in self.model.items() if k == "record"}
                revealed = f.get_local()
                assert Counter(r.name for r in revealed) == Counter(list(records))
                for r in revealed:
                    with open(r.path, "rb") as fh:
                        assert fh.read() == records[r.name], r.name
                objects = {n: d for n, (k, d) in self.model.items() if k == "object"}
                stripes = f.local_stripes()
                assert Counter((s.object, s.index) for s in stripes) == Counter(
                    (n, i) for n, d in objects.items() for i in range(-(-len(d) // STRIPE))
                )
                for s in stripes:
                    with open(s.path, "rb") as fh:
                        assert fh.read() == objects[s.object][s.offset : s.offset + s.size]

        def teardown(self):
            if self.down is not None:
                self.restart_peer()

    run_state_machine_as_test(
        ClusterModel,
        settings=settings(
            max_examples=15,
            stateful_step_count=20,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
    print(dict(ran))
    assert all(
        ran[r] >= 3 for r in ("put", "put_object", "replace", "replace_object", "delete", "kill_peer", "check")
    ), ran
