"""A public path kept for operators: ``python -m st_py.capability new-key
PATH`` and ``mint`` (docs/capabilities.md). The module is
:mod:`st_py.core.capability`."""

from st_py.core.capability import *  # noqa: F401,F403
from st_py.core.capability import main

if __name__ == "__main__":
    main()
