"""The static checks' parser (helpers.parse_python) holds while other
threads parse: CPython 3.11's AST constructor shares one depth counter
between threads (gh-106905), and the suite's processes run Ray's, Dask's
and the trackers' threads, which format tracebacks (3.11 parses the lines
it underlines)."""

from __future__ import annotations

import ast
import sys
import threading
from pathlib import Path

import helpers
from helpers import parse_python


class _ParsesWhenCollected:
    """Garbage whose finalizer parses, as a traceback printed from a
    finalizer or a thread does."""

    def __del__(self):
        try:
            ast.parse("x = (1 + 2) * f(a, b)[3]")
        except SystemError:
            pass  # this parse may be the one upset


def test_a_parse_holds_while_other_threads_parse():
    source = Path(helpers.__file__).read_text()
    stop = threading.Event()

    def parse_beside():
        while not stop.is_set():
            try:
                ast.parse("y = [i for i in range(3)]")
            except SystemError:
                pass  # this thread's own parse may be the one upset

    def make_garbage():
        while not stop.is_set():
            cycle = [_ParsesWhenCollected() for _ in range(100)]
            for g in cycle:
                g.me = g
            del cycle
            stop.wait(0.001)

    threads = [threading.Thread(target=f, daemon=True) for f in (parse_beside, make_garbage)]
    for t in threads:
        t.start()
    try:
        upset = 0
        for _ in range(60):
            try:
                ast.parse(source)
            except SystemError:
                upset += 1
            parse_python(source)  # never upset
    finally:
        stop.set()
        for t in threads:
            t.join()
    # the bare parse beside it shows the hazard is real on this interpreter
    if sys.version_info[:2] == (3, 11):
        assert upset > 0, "no bare parse was upset: the test no longer shows the hazard"
