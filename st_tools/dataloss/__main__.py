"""``python -m st_tools.dataloss``: see :mod:`st_tools.dataloss.cli`."""

import sys

from st_tools.dataloss.cli import main

sys.exit(main())
