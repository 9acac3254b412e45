"""Render the unit and environment templates from a plan, exactly as Ansible's `template` module does.

The Jinja2 settings (trim_blocks, trailing newline, `ansible_managed`, the `comment` filter) match
ansible-core's defaults so that `pdfleet render` previews are byte-identical to what lands on hosts;
a test renders both ways and compares.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import jinja2

from pdfleet.errors import PdfleetError
from pdfleet.paths import TEMPLATE_DIR
from pdfleet.planner import Plan, Unit

ANSIBLE_MANAGED = "Ansible managed"


def comment(text: str) -> str:
    """ansible.builtin's `comment` filter, default (plain) style."""
    body = "\n".join(f"# {line}" if line else "#" for line in text.splitlines())
    return f"#\n{body}\n#"


def environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["comment"] = comment
    return env


def unit_context(unit: Unit, plan: Plan) -> dict[str, object]:
    """The variables a unit's templates see; the Ansible role passes the same two."""
    return {
        "pdfleet_units_unit": dict(asdict(unit), exec_start_line=unit.exec_start_line,
                                   exec_start_post_line=unit.exec_start_post_line),
        "pdfleet_units_service": plan.service,
        "ansible_managed": ANSIBLE_MANAGED,
    }


def unit_templates(unit: Unit) -> dict[str, str]:
    """Output file name -> template name for one unit."""
    service = "router.service.j2" if unit.kind == "router" else "worker.service.j2"
    return {f"{unit.name}.service": service, f"{unit.name}.env": "unit.env.j2"}


def render_unit(unit: Unit, plan: Plan, env: jinja2.Environment | None = None) -> dict[str, str]:
    env = env or environment()
    ctx = unit_context(unit, plan)
    return {out: env.get_template(tpl).render(ctx) for out, tpl in unit_templates(unit).items()}


class RenderPathError(PdfleetError):
    """A host or unit name that would put a file outside the output directory (the planner refuses such names;
    this is the writer's own guard)."""


def render_plan(plan: Plan, out_dir: Path) -> list[Path]:
    """Write every host's files under out_dir/<host>/; only files whose bytes change are rewritten."""
    env = environment()
    written: list[Path] = []
    root = out_dir.resolve()
    for host, units in plan.hosts.items():
        for unit in units:
            for name, text in render_unit(unit, plan, env).items():
                path = out_dir / host / name
                if path.resolve().parent != root / host or Path(host).name != host or host in {".", ".."}:
                    raise RenderPathError(f"{host}: {host}/{name} would be written outside {out_dir}; rename the "
                                          "host or unit to a plain name (letters, digits, . _ -)")
                path.parent.mkdir(parents=True, exist_ok=True)
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    path.write_text(text, encoding="utf-8")
                written.append(path)
    return written
