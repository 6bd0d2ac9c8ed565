"""The tracker client's call pool (st_py/wire/call_pool.py): calls started
without waiting for them (group commits, reports of stored copies) answer
as gRPC's futures did, in a forked child too (no processes but a fork)."""

from __future__ import annotations

import os
import select
import threading

import pytest

from st_py.wire.call_pool import CallPool


def test_a_call_answers_its_result_or_raises_its_own_error():
    pool = CallPool()
    assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=10) == 5
    err = ValueError("the call's own error")

    def fail():
        raise err

    fut = pool.submit(fail)
    with pytest.raises(ValueError) as info:
        fut.result(timeout=10)
    assert info.value is err and fut.done()
    pool.close()
    assert pool.submit(threading.get_ident).result(timeout=10) != threading.get_ident()  # threads again


def test_a_forked_child_gets_threads_of_its_own():
    """A parent's pool threads do not exist in a forked child (a Dask or
    Ray worker forked from a writer): the child's first call makes new
    ones instead of queueing for threads that will never run it."""
    pool = CallPool()
    assert pool.submit(os.getpid).result(timeout=10) == os.getpid()  # the parent's threads exist
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer within 10 s or say it hung
        try:
            ok = pool.submit(os.getpid).result(timeout=10) == os.getpid()
            os.write(w, b"ok" if ok else b"wrong")
        except Exception as e:
            os.write(w, repr(e).encode()[:200] or b"error")
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 30)
        assert ready, "the child wrote nothing in 30 s"
        assert os.read(r, 256) == b"ok"
    finally:
        os.close(r)
        os.waitpid(pid, 0)
        pool.close()
