"""Each role README's inputs table, written from its meta/argument_specs.yml (the one home of a role's inputs).

    .venv/bin/python tests/lint/role_readmes.py          # rewrite the tables
tests/lint/test_roles.py holds every README's table equal to what this writes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROLES_DIR = Path(__file__).resolve().parents[2] / "ansible" / "roles"
HEADING = "## Inputs (meta/argument_specs.yml)"


def _one_line(text: object) -> str:
    if isinstance(text, list):
        text = " ".join(str(t) for t in text)
    return re.sub(r"\s+", " ", str(text or "")).strip().replace("|", "\\|")


def _default(opt: dict[str, Any]) -> str:
    if opt.get("required"):
        return "required"
    if "default" not in opt:
        return "see defaults/main.yml"
    return f"`{opt['default']}`"


def inputs_table(role: Path) -> str:
    """The markdown inputs table of ``role``'s entry points (main first)."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    out: list[str] = []
    for entry in sorted(specs, key=lambda e: (e != "main", e)):
        if len(specs) > 1:
            out += [f"Entry point `{entry}`:", ""]
        out += ["| name | type | default | description |", "|---|---|---|---|"]
        for name, opt in (specs[entry].get("options") or {}).items():
            kind, text = opt.get("type", "str"), _one_line(opt.get("description"))
            out.append(f"| `{name}` | {kind} | {_default(opt)} | {text} |")
        out.append("")
    return "\n".join(out) + "\n"


def section(text: str) -> tuple[int, int]:
    """Where the inputs table of a README is: after the heading, up to the next heading."""
    start = text.index(HEADING) + len(HEADING)
    nxt = text.find("\n## ", start)
    return start, (len(text) if nxt < 0 else nxt + 1)


def rendered(role: Path) -> str:
    text = (role / "README.md").read_text()
    start, end = section(text)
    return text[:start] + "\n\n" + inputs_table(role) + text[end:]


if __name__ == "__main__":
    for role in sorted(p for p in ROLES_DIR.iterdir() if p.is_dir()):
        (role / "README.md").write_text(rendered(role))
        print(f"wrote {role / 'README.md'}", file=sys.stderr)
