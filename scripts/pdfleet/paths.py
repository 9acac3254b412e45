"""Where the package's own data lives (package data, read through importlib.resources), and the checkout's root.

The unit templates, the SGLang patches with their manifests, the shared constants and the launch-check store
are package data: an installed wheel (the execution environment's) plans and renders from them exactly as a
checkout does. The package is installed as plain files (never from a zip), so each is a directory on disk.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGE_DIR = Path(str(resources.files("pdfleet")))
TEMPLATE_DIR = PACKAGE_DIR / "templates"
PATCH_DIR = PACKAGE_DIR / "patches"


def _checkout() -> Path | None:
    """The project checkout the package runs from (an editable install or PYTHONPATH=scripts), if any."""
    root = PACKAGE_DIR.parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "site.yml").is_file() else None


CHECKOUT = _checkout()
# The bundle's root: the checkout, or (an installed wheel) the directory pdfleet runs in, where site.yml,
# inventory/ and reports/ are.
REPO_ROOT = CHECKOUT or Path.cwd()
DEFAULT_INVENTORY = REPO_ROOT / "inventory" / "sim"


def package_relative(path: Path) -> str:
    """``path`` (a file of the package's data) as the same string from every install: pdfleet/<relative path>."""
    return str(Path("pdfleet") / path.relative_to(PACKAGE_DIR))
