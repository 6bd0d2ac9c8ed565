"""The tracker's replies as plain data: the one conversion of a protobuf
message into a frozen dataclass of the same fields (the brief's rule for
public results; :mod:`st_py.client.cluster_status`, :mod:`st_py.client.file_info`).

A dataclass made for a message declares the message's fields by the same
names, so code that read the message reads the dataclass alike; nested
messages become their own dataclasses and repeated fields tuples.
``tests/test_plain_replies.py`` checks each dataclass against its message's
descriptor, so a field added to the protocol is not silently dropped.

Thread safety: pure functions over immutable values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def plain(cls: type[T], msg: Any, nested: dict[str, type] | None = None) -> T:
    """``cls`` (a frozen dataclass) from the protobuf ``msg`` of the same
    fields. ``nested`` maps a field holding a message, or a repeated field
    of messages, to the dataclass made for it (whose own ``NESTED`` class
    attribute, if any, maps its nested fields in turn); every other repeated
    field becomes a tuple of its values."""
    nested = nested if nested is not None else getattr(cls, "NESTED", {})
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        v = getattr(msg, f.name)
        inner = nested.get(f.name)
        repeated = hasattr(v, "__len__") and not isinstance(v, (str, bytes))
        if inner is not None:
            kw[f.name] = tuple(plain(inner, m) for m in v) if repeated else plain(inner, v)
        else:
            kw[f.name] = tuple(v) if repeated else v
    return cls(**kw)


__all__ = ["plain"]
