"""A lint-level rule (issue "no failure reported as success"): a callback
handed to ``queue_put``/``queue_get`` (``callback=``) receives the
operation's error, so it must look at it. A callback that takes ``*_`` or
leaves a parameter unused is how ``storetorrent put`` once reported every
failed record as stored."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import parse_python

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("st_py", "st_tools", "integrations", "bench", "loadtest")


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _ignored_params(fn: ast.Lambda | ast.FunctionDef) -> list[str]:
    """What ``fn`` drops of its arguments: ``*args``/``**kw``, or its error
    (the last positional parameter without a default) if its body never
    reads it."""
    a = fn.args
    out = [f"*{a.vararg.arg}" for _ in [0] if a.vararg] + [f"**{a.kwarg.arg}" for _ in [0] if a.kwarg]
    params = a.posonlyargs + a.args
    required = params[: len(params) - len(a.defaults)]
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    used = set().union(*(_names_used(b) for b in body))
    return out + [p.arg for p in required[-1:] if p.arg not in used]


def _violations(path: Path) -> list[str]:
    tree = parse_python(path.read_text(), str(path))
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg != "callback":
                continue
            fn = (
                kw.value
                if isinstance(kw.value, ast.Lambda)
                else (defs.get(kw.value.id) if isinstance(kw.value, ast.Name) else None)
            )
            if fn is None:
                continue
            dropped = _ignored_params(fn)
            if dropped:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: callback drops {', '.join(dropped)}")
    return out


def test_callbacks_look_at_their_error():
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_proto" not in path.parts:
                found += _violations(path)
    assert not found, "callbacks must receive and check the error:\n" + "\n".join(found)


def test_the_rule_finds_a_dropped_error(tmp_path):
    bad = ROOT / "tests" / "_lint_sample.py"
    try:
        bad.write_text(
            "f.queue_put('a', b'', callback=lambda *_, n=1: prog.advance(n))\n"
            "def cb(name, body, exc):\n    print(name, body)\n"
            "f.queue_get('a', callback=cb)\n"
            "f.queue_get('b', callback=lambda name, body, exc: errs.append(exc))\n"
        )
        got = _violations(bad)
    finally:
        bad.unlink()
    assert len(got) == 2 and "*_" in got[0] and "exc" in got[1]
