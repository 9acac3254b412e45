"""``python -m pdfleet.verify …`` = ``pdfleet verify …`` (the form the verification play uses)."""

import sys

from pdfleet.cli import main

sys.exit(main(["verify", *sys.argv[1:]]))
