"""Test helpers are defined once (issue 30, item 8): a fixture lives in
``conftest.py``, a plain helper in ``helpers.py`` (or the shared
``checks.py`` / ``analysis_data.py``), and the test modules import them.
Checked statically with ``ast`` over every module of ``tests/``: a
module-level function defined in two modules with the same name and the
same body (docstrings aside, decorators and all), or with the same body of
``MIN_STATEMENTS`` statements or more under another name, is a copy."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from helpers import parse_python

TESTS = Path(__file__).resolve().parent

# a body this long is a copy under any name; a shorter one only under the same name
MIN_STATEMENTS = 3


def definitions(source: str) -> list[tuple[str, str, int, int]]:
    """``(name, body, statements, line)`` of each module-level function of
    ``source``; ``body`` is the ``ast.dump`` of its decorators, arguments and
    statements, its docstring left out."""
    out = []
    for node in parse_python(source).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        if not body:
            continue
        statements = sum(isinstance(n, ast.stmt) for b in body for n in ast.walk(b))
        shape = ast.dump(ast.Module(body=[*node.decorator_list, node.args, *body], type_ignores=[]))
        out.append((node.name, shape, statements, node.lineno))
    return out


def copies(sources: dict[str, str]) -> list[str]:
    """The functions of ``{module: source}`` defined again in another module."""
    by_body: dict[str, list[tuple[str, str, int, int]]] = defaultdict(list)
    for module, source in sources.items():
        for name, body, statements, line in definitions(source):
            by_body[body].append((module, name, statements, line))
    found = []
    for places in by_body.values():
        for i, (m1, n1, statements, l1) in enumerate(places):
            for m2, n2, _, l2 in places[i + 1 :]:
                if m1 != m2 and (n1 == n2 or statements >= MIN_STATEMENTS):
                    found.append(f"{m1}:{l1} {n1} ~ {m2}:{l2} {n2}")
    return sorted(found)


def _found() -> list[str]:
    return copies({p.name: p.read_text() for p in sorted(TESTS.glob("*.py"))})


def test_no_helper_is_defined_in_two_test_modules():
    found = _found()
    assert not found, "helpers defined twice (move them to conftest.py or helpers.py):\n" + "\n".join(found)


def test_the_checker_finds_a_copy():
    helper = 'def {name}(df):\n    """{doc}"""\n    return df.sort_values(["part", "row"])\n'
    long = "def {name}(x):\n    y = x + 1\n    z = y * 2\n    return z\n"
    sources = {
        "a.py": helper.format(name="_sorted", doc="one") + long.format(name="grow"),
        "b.py": helper.format(name="_sorted", doc="another") + long.format(name="enlarge"),
        "c.py": "def _sorted(df):\n    return df.sort_values('x')\n" + helper.format(name="rows", doc=""),
    }
    # the same short body under another name (c.py's rows) is not a copy; a long one is
    assert copies(sources) == ["a.py:1 _sorted ~ b.py:1 _sorted", "a.py:4 grow ~ b.py:4 enlarge"]
