"""The state file the running watchdog writes after every round and ``pdfleet watchdog status`` reads.
Written atomically (a temporary file renamed over it), so a reader never sees half a document."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.versions import WATCHDOG_STATE_DIR

SCHEMA = 1
# Where the deployed watchdog writes it (the pdfleet_watchdog unit's --state-file, in its StateDirectory).
DEFAULT_STATE_FILE: Path = WATCHDOG_STATE_DIR / "state.json"


class StateFileError(PdfleetError):
    """The state file is missing or unreadable: the watchdog is not running or writes elsewhere."""


def write_state(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"schema": SCHEMA, **doc}, fh, indent=1, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise StateFileError(f"{path}: no watchdog state file (is pdfleet-watchdog.service running? "
                             "pass --state-file where it writes)") from None
    except (OSError, ValueError) as e:
        raise StateFileError(f"{path}: cannot read the watchdog state: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("pairs"), dict):
        raise StateFileError(f"{path}: not a watchdog state file of schema {SCHEMA}")
    return doc
