"""Lookup plugin pdfleet_template: a template rendered as the template module writes it, for a role's one probe.

The roles compare what is on a host with what the template module would write (its sha256), on every run. The
builtin template lookup deep-copies every variable of the task for each file it renders; with the cluster's plan
among a host's facts that copy costs more than the rendering and grows with the fleet. This lookup renders with
a shallow copy (a template reads variables, it never changes them), the same Jinja settings (trim_blocks, the
trailing newline kept, backslashes as written) and the same template variables (ansible_managed, template_path,
...). tests/ansible_plugins/test_template_lookup.py holds its output equal to the builtin lookup's.
"""

from __future__ import annotations

DOCUMENTATION = """
name: pdfleet_template
short_description: render templates as the template module writes them, without copying every variable
description:
  - Returns the rendered text of each template file found in the role's or play's templates search path.
options:
  _terms:
    description: The template files (relative to a templates/ directory of the search path, or absolute).
    required: true
  template_vars:
    description: Variables added to the task's variables while rendering.
    type: dict
    default: {}
"""

# The imports follow the documentation (ansible-test sanity: import-before-documentation).
import os  # noqa: E402
from typing import Any  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.template import generate_ansible_template_vars, trust_as_template  # noqa: E402

from ansible.plugins.lookup import LookupBase  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[str]:
        variables = variables or {}
        self.set_options(var_options=variables, direct=kwargs)
        extra = self.get_option("template_vars") or {}
        rendered = []
        for term in terms:
            path = self.find_file_in_search_path(variables, "templates", term)
            if not path:
                raise AnsibleLookupError(f"pdfleet_template: no template {term!r} in the templates search path "
                                         f"(the role's templates/ or an absolute path)")
            text = trust_as_template(self._loader.get_text_file_contents(path))
            context = dict(variables)  # shallow: a template reads the variables, it never changes them
            template_vars = generate_ansible_template_vars(term, path)
            if "ansible_managed" in variables:  # as the builtin lookup: a user's ansible_managed is kept
                del template_vars["ansible_managed"]
            context.update(template_vars)
            context.update(extra)
            templar = self._templar.copy_with_new_env(available_variables=context,
                                                      searchpath=[os.path.dirname(path)])
            rendered.append(templar.template(text, escape_backslashes=False, preserve_trailing_newlines=True,
                                             overrides={"trim_blocks": True}))
        return rendered
