"""The tracker's ``--config FILE`` (TOML; docs/deployment.md).

Every flag of ``python -m st_py.tracker`` is a key, without its ``--``, with
underscores or dashes (``key_file`` or ``key-file``); flags given on the
command line override the file. An unknown key, a key given twice or a value
of the wrong type stops the tracker with a message naming the file and the
key.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import tomllib

# Not keys: they only make sense on a command line.
# shard, shards, master, master_pid, master_epoch: set by a master for the per-file trackers it spawns.
COMMAND_LINE_ONLY = {"help", "config", "shard", "shards", "master", "master_pid", "master_epoch"}


def _kind(action: argparse.Action) -> tuple[str, tuple[type, ...]]:
    """What a key's TOML value must be, for the flag ``action``."""
    if action.nargs == 0 and isinstance(action.const, bool):  # store_true / store_false
        return "true or false", (bool,)
    if action.type is int:
        return "an integer", (int,)
    if action.type is float:
        return "a number", (int, float)
    return "a string", (str,)


def _type_name(v: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(v), "a date or time")


class OptionsParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that keeps the options added to it
    (:attr:`options`), so a config file is checked against them without
    reading argparse's private state. Not shared between threads."""

    def __init__(self, *args, **kwargs):
        self.options: list[argparse.Action] = []  # before argparse adds --help through add_argument
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs) -> argparse.Action:  # type: ignore[override]
        """``ArgumentParser.add_argument``, also keeping the action in :attr:`options`."""
        action = super().add_argument(*args, **kwargs)
        self.options.append(action)
        return action


def apply_config(ap: OptionsParser, path: Path) -> dict[str, object]:
    """Read TOML file ``path`` and make its keys the defaults of ``ap``'s
    flags (so the command line overrides them); a required flag the file
    sets is no longer required. Returns the values set, by destination.

    Raises
    ------
    SystemExit
        The file cannot be read or is not TOML, or a key is unknown, given
        twice or of the wrong type: the message names the file and the key.
    """
    try:
        conf = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SystemExit(f"tracker: cannot read --config {path}: {e}") from None
    actions = {a.dest: a for a in ap.options if a.dest not in COMMAND_LINE_ONLY and a.option_strings}
    values: dict[str, object] = {}
    seen: dict[str, str] = {}
    for key, v in conf.items():
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None:
            if dest in COMMAND_LINE_ONLY:
                raise SystemExit(
                    f"tracker: {path}: key '{key}' is not allowed in a config file "
                    f"(--{dest} is only for the command line)"
                )
            raise SystemExit(
                f"tracker: {path}: unknown key '{key}' (the keys are the tracker's flags without "
                f"--: {', '.join(sorted(actions))})"
            )
        if dest in seen:
            raise SystemExit(
                f"tracker: {path}: key '{key}' sets --{dest.replace('_', '-')}, which '{seen[dest]}' already set"
            )
        seen[dest] = key
        want, types = _kind(action)
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise SystemExit(f"tracker: {path}: key '{key}' must be {want}, not {_type_name(v)}")
        if action.choices is not None and v not in action.choices:
            raise SystemExit(
                f"tracker: {path}: key '{key}' is {v!r}; it must be one of {', '.join(map(str, action.choices))}"
            )
        if callable(action.type) and isinstance(v, str):
            try:
                v = action.type(v)
            except (TypeError, ValueError) as e:
                raise SystemExit(f"tracker: {path}: key '{key}': {e}") from None
        elif action.type is float:
            v = float(v)  # type: ignore[arg-type]  # a TOML number or string; a bad one raises
        values[dest] = v
    ap.set_defaults(**values)
    for a in ap.options:
        if a.dest in values:
            a.required = False
    return values
