"""What the durability tools' reports share: the rich console, the
matplotlib preamble and the figure's save, the JSON file, number formats,
the comma-separated class lists of their command lines, and the typed
results' dict face.

Used by :mod:`st_tools.dataloss` and :mod:`st_tools.reliability`; rich and
matplotlib are imported on first use, so the models load without them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any


def console(min_width: int) -> Any:
    """A rich console, at least ``min_width`` columns wide when the output
    is not a terminal (a file or a pipe: tables are not cut).

    Returns
    -------
    rich.console.Console
    """
    from rich.console import Console

    out = Console()
    if not out.is_terminal and out.width < min_width:
        out = Console(width=min_width)
    return out


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files, no display).

    Raises
    ------
    RuntimeError
        If matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - matplotlib is in the test extra
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path) -> None:
    """Lay out ``fig``, write it as a PNG at 110 dpi (parent directories
    created) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write ``data`` as indented JSON (parent directories created)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1))


def fmt_g(x: float) -> str:
    """Four significant digits."""
    return f"{x:.4g}"


def fmt_pct(x: float) -> str:
    """A fraction as a percentage with three significant digits; "0" for 0."""
    return "0" if x == 0 else f"{100 * x:.3g}%"


def comma_ints(ap: argparse.ArgumentParser, flag: str, text: str) -> list[int]:
    """The integers of a comma-separated option; ``ap.error`` (exit 2) if
    one is not an integer."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error(f"{flag} must be comma-separated integers, got {text!r}")


class DictView:
    """Mixin of the tools' result dataclasses: ``to_dict()`` (the JSON the
    tools write, fields in declaration order) and ``result[key]``, the dict
    access of the results before they were typed."""

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready plain data."""
        assert dataclasses.is_dataclass(self)
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]


def _plain(v: Any) -> Any:
    if isinstance(v, DictView):
        return v.to_dict()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v
