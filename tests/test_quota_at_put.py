"""Quota at the put that crosses it (docs/security.md, "Quotas"): the
tracker admits bytes as a writer's group commits go (a group is committed
once it holds ``COMMIT_BYTES``), commits the records that fit and refuses
the rest; the writer's next put raises ``QuotaExceededError`` naming the
quota and its use, and ``close()`` commits what was admitted. Before, with
a 50 MB quota, ``put()`` returned 20 times (80 MB), then ``close()``
raised and nothing was committed, not even the records that fit."""

from __future__ import annotations

import pytest

from st_py.client.group_commit import COMMIT_BYTES
from st_py.errors import QuotaExceededError

QUOTA = 20_000_000
RECORD = 1_000_000


def _blob(i: int) -> bytes:
    return bytes([i % 251]) * RECORD


@pytest.mark.parametrize("replication,copies", [("x1", 1), ("x2", 2)])
def test_the_put_that_crosses_the_quota_raises_and_what_fits_is_committed(make_cluster, replication, copies):
    cluster = make_cluster(3, tracker_args=["--quota-bytes", str(QUOTA)])
    fits = QUOTA // (RECORD * copies)
    c = cluster.client()
    f = c.create("/q/run", replication)
    put = 0
    with pytest.raises(QuotaExceededError) as e:
        for i in range(3 * fits + 20):
            f.put(f"r{i:03d}", _blob(i))
            put += 1
    err = e.value
    assert (err.scope, err.quota_bytes) == ("file", QUOTA), err
    assert err.used_bytes <= QUOTA and err.records and err.records[0] == f"r{fits:03d}", err
    assert f"{QUOTA:,}" in str(err)
    # told while writing, not at close: at most a commit group (and one in flight) past the quota
    assert put <= fits + 2 * COMMIT_BYTES // RECORD + 2, put
    f.close()  # commits what was admitted; the refusal was reported by the put
    with c.open("/q/run") as g:
        names = g.names()
        assert names == [f"r{i:03d}" for i in range(fits)]  # every record that fits, in order
        assert all(g.get(n) == _blob(int(n[1:])) for n in names[:: max(1, fits // 5)])
    assert sum(1 for _ in names) * RECORD * copies <= QUOTA
