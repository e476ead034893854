"""``python -m server.cli``: the ``kpe`` command without its console script."""

import sys

from server.cli.main import main

sys.exit(main())
