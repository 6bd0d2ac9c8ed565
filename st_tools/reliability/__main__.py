"""``python -m st_tools.reliability``: see :mod:`st_tools.reliability.cli`."""

import sys

from st_tools.reliability.cli import main

sys.exit(main())
