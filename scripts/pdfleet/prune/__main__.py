"""Run ``python -m pdfleet.prune`` (the units role's drain step: :func:`pdfleet.prune.cli.main`)."""

import sys

from pdfleet.prune.cli import main

sys.exit(main())
