"""The client library (paper section 3, figure 4; docs/architecture.md, "The
client package by role").

:class:`Client` (:mod:`st_py.client.client`) creates and opens files;
:class:`StFile` (:mod:`st_py.client.file`) is one open file, composed of the
parts this package holds: the file context, the writer and its placer, the
reader, GET_LOCAL, versions, striped objects, copies, the group committer.
Built on :mod:`st_py.core` and :mod:`st_py.wire`. Its names are imported when
first used (PEP 562), as the package :mod:`st_py` does.
"""

from typing import TYPE_CHECKING

_LAZY = {"Client": "client", "create": "client", "open": "client", "StFile": "file", "WriteBatch": "write_batch"}

if TYPE_CHECKING:
    from .client import Client, create, open
    from .file import StFile
    from .write_batch import WriteBatch


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'st_py.client' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["Client", "create", "open", "StFile", "WriteBatch"]
