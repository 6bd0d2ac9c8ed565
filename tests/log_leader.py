"""A tracker-like process for tests/test_metadata_log.py: campaigns in an
etcd cluster, then appends numbered entries forever, printing ``term T``
once elected, ``acked I N`` after entry I was committed at index N, and
``fenced ...`` (exit 3) when an append is refused because its term ended.

usage: python log_leader.py ENDPOINTS CLUSTER ADDR
"""

import asyncio
import sys

from st_py.tracker.log.election import Election
from st_py.tracker.log.errors import ConsensusUnavailableError, FencedError
from st_py.tracker.log.etcd_log import EtcdLog
from st_py.tracker.log.etcd_session import EtcdSession


async def main(endpoints: str, cluster: str, addr: str) -> int:
    session = EtcdSession(endpoints.split(","))
    log = await EtcdLog.open(session, cluster)
    election = Election(session, cluster, addr, ttl=2)
    term = await election.campaign()
    print(f"term {term}", flush=True)
    i = 0
    while True:
        i += 1
        try:
            index = await log.append([f"{addr} {i}".encode()], term)
        except FencedError as e:
            print(f"fenced {i} {e.leader_term} {e.leader}", flush=True)
            return 3
        except ConsensusUnavailableError as e:
            print(f"unavailable {i} {e.detail}", flush=True)
            continue
        print(f"acked {i} {index}", flush=True)
        await asyncio.sleep(0.02)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:4])))
