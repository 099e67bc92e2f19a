"""``python -m verlfit`` is the same as the ``verlfit`` command."""

from verlfit.cli import main

raise SystemExit(main())
