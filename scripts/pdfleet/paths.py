"""Where the bundle's own files live (the package is installed from the repo, in editable mode)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = REPO_ROOT / "templates"
PATCH_DIR = REPO_ROOT / "ansible" / "roles" / "sglang" / "files" / "patches"
DEFAULT_INVENTORY = REPO_ROOT / "inventory" / "sim"
