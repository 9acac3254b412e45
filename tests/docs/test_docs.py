"""Every command and repository path the docs name exists (issue 27, item 6).

Scanned: README.md and docs/*.md. Each check collects every miss, with the doc file and line, and one test per
check fails listing all of them at once.

Where the checks look: inline code (`...`, which may wrap over a line break) and the commands of shell code
blocks (```sh / bash / shell / console, or a block without a language; a `#` comment in a block is prose and
not read). YAML blocks and plain prose are not read, except for links.

(a) links: every relative markdown link ``[text](target)`` exists relative to the doc's own folder; a
    ``#anchor`` (alone or after a .md target) must be a heading of that doc (GitHub's slugs).
(b) paths: a token looks like a repository path when it contains '/' or ends in .yml, .yaml, .py, .md, .j2,
    .cfg, .toml or .json (for ``--opt=VALUE`` / ``VAR=VALUE`` tokens the value is read). It must exist relative
    to the repository root, except:
    - a URL (``scheme://``), an absolute path (``/etc/...``, ``/var/lib/...``, ``/opt/...``, and HTTP routes
      such as ``/health``): host-side paths are not in this repository;
    - a placeholder: the token contains ``< > { } [ ] * $ …`` or ``...`` (``<inventory>/hosts.yml``,
      ``reports/verify-<time>.json``, ``nvidia-*``); only its fixed leading folders are checked
      (``ansible/roles/<role>/meta/argument_specs.yml``: ``ansible/roles/`` must exist);
    - a path under what a run creates (``reports/``, ``.cache/``, ``.venv/``: made by ``make setup`` and the
      tests, absent from a clean clone);
    - a file of the pinned SGLang package, always written from its top (``sglang/srt/...``);
    - the reader's own production inventory of the examples, ``inventory/prod``;
    - the plan document's schema name (``pdfleet-plan/1``, ``pdfleet.plandoc.SCHEMA``).
    A bare file name (no '/') therefore names a file at the repository root (``site.yml``, ``ansible.cfg``).
(c) ``make TARGET``: TARGET is a target of the Makefile.
(d) ``pdfleet SUB [SUBSUB]`` (also ``.venv/bin/pdfleet``): SUB is a subcommand of the real CLI parser
    (``pdfleet.cli.build_parser``) and, where SUB has subcommands of its own, SUBSUB is one of them.
(e) ``ansible-playbook ... X.yml``: every .yml argument (not the value of ``-i``/``-e``/...) is a file of this
    repository that is a playbook (a YAML list of plays or playbook imports).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pdfleet.plandoc import SCHEMA as PLAN_SCHEMA

REPO = Path(__file__).resolve().parents[2]
PATH_SUFFIXES = (".yml", ".yaml", ".py", ".md", ".j2", ".cfg", ".toml", ".json")
PLACEHOLDER_CHARS = set("<>{}[]*$…")
RUN_MADE_ROOTS = ("reports", ".cache", ".venv")
UPSTREAM_ROOTS = ("sglang",)
READER_PATHS = ("inventory/prod",)
NOT_PATHS = (PLAN_SCHEMA,)  # names with a '/' that are not paths: the plan document's schema, pdfleet-plan/1
SHELL_LANGS = {"", "sh", "bash", "shell", "console"}
# ansible-playbook options whose value is not a playbook
PLAYBOOK_VALUE_OPTIONS = {"-i", "--inventory", "-e", "--extra-vars", "--vault-password-file", "--vault-id", "-t",
                          "--tags", "--skip-tags", "-l", "--limit", "-u", "--user", "--private-key"}

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)[^\n]*$", re.M)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"(?<!\!)\[(?:[^\]\n]|\n(?!\n))*?\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MAKE = re.compile(r"(?:^|[\s;&|(])make\s+([A-Za-z0-9][\w.-]*)")
PDFLEET = re.compile(r"(?:^|[\s;&|(/])pdfleet[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?")


@dataclass(frozen=True)
class Snippet:
    """A piece of code a doc shows: an inline code span or one command line of a shell block."""

    doc: str
    line: int
    text: str
    block: bool


@dataclass(frozen=True)
class Miss:
    doc: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.what}"


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def split_fences(text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """The text with every fenced block blanked (line count kept), and the blocks as (first line, lang, body)."""
    out: list[str] = []
    blocks: list[tuple[int, str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence, lang = m.group(2), m.group(3).lower()
        body: list[str] = []
        out.append("")
        j = i + 1
        while j < len(lines) and not re.fullmatch(re.escape(fence[0]) + f"{{{len(fence)},}}", lines[j].strip()):
            body.append(lines[j])
            out.append("")
            j += 1
        blocks.append((i + 2, lang, "\n".join(body)))
        if j < len(lines):
            out.append("")
        i = j + 1
    return "\n".join(out), blocks


def snippets(text: str, doc: str = "doc.md") -> Iterator[Snippet]:
    """Inline code spans (outside fences) and shell blocks' command lines, comments cut off."""
    prose, blocks = split_fences(text)
    for m in INLINE_CODE.finditer(prose):
        yield Snippet(doc, prose.count("\n", 0, m.start()) + 1, m.group(2), False)
    for first, lang, body in blocks:
        if lang not in SHELL_LANGS:
            continue
        for k, line in enumerate(body.split("\n")):
            command = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
            if command:
                yield Snippet(doc, first + k, command, True)


def _tokens(text: str) -> Iterator[str]:
    for raw in text.split():
        token = raw.strip("()\"',;:")
        if (token.startswith("-") and "=" in token) or re.match(r"^[A-Za-z_][\w.]*=", token):
            token = token.split("=", 1)[1]  # --opt=VALUE, VAR=VALUE: the value
        token = token.lstrip("@").strip("\"'")
        if token:
            yield token


def path_candidates(text: str) -> list[str]:
    """The tokens of `text` that look like repository paths (rule (b) of the module docstring)."""
    out = []
    for token in _tokens(text):
        if "/" not in token and not token.endswith(PATH_SUFFIXES):
            continue
        if "://" in token or token.startswith(("/", "~")) or token in ("/", "//"):
            continue
        first = token.split("/", 1)[0]
        if first in RUN_MADE_ROOTS or first in UPSTREAM_ROOTS or token.rstrip("/") in READER_PATHS + NOT_PATHS:
            continue
        if PLACEHOLDER_CHARS & set(token) or "..." in token:
            # a placeholder path: its fixed leading folders still name the repository
            # (ansible/roles/<role>/... -> ansible/roles/)
            fixed = []
            for part in token.split("/"):
                if PLACEHOLDER_CHARS & set(part) or "..." in part:
                    break
                fixed.append(part)
            if fixed and len(fixed) < len(token.split("/")):
                out.append("/".join(fixed) + "/")
            continue
        out.append(token)
    return out


def make_targets_named(text: str) -> list[str]:
    return MAKE.findall(text)


def pdfleet_commands(text: str) -> list[tuple[str, str]]:
    """(subcommand, next word or '') for each `pdfleet SUB ...` in `text`."""
    return [(m.group(1), m.group(2) or "") for m in PDFLEET.finditer(text)]


def playbooks_named(text: str) -> list[str]:
    """The .yml arguments after `ansible-playbook` (not option values such as -i's)."""
    out: list[str] = []
    for part in re.split(r"[;&|]+", text):
        words = part.split()
        starts = [i for i, w in enumerate(words) if w.endswith("ansible-playbook")]
        if not starts:
            continue
        skip = False
        for word in words[starts[0] + 1:]:
            if skip:
                skip = False
                continue
            if word in PLAYBOOK_VALUE_OPTIONS:
                skip = True
                continue
            if not word.startswith("-") and word.endswith((".yml", ".yaml")):
                out.append(word)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose, _ = split_fences(text)
    found: set[str] = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, re.M):
        base = slug(m.group(1))
        n = 0
        while (name := base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(name)
    return found


def makefile_targets(makefile: Path) -> set[str]:
    targets: set[str] = set()
    for line in makefile.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.%/ -]+?)\s*::?(?!=)", line)
        if m and not line.startswith((".", "\t")):
            targets.update(m.group(1).split())
    return targets


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def is_playbook(path: Path) -> bool:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, list) and bool(data) and all(
        isinstance(p, dict) and ("hosts" in p or "ansible.builtin.import_playbook" in p or "import_playbook" in p)
        for p in data)


# --- the checks ---------------------------------------------------------------------------------------------


def link_misses(doc: Path) -> list[Miss]:
    text = doc.read_text()
    prose, _ = split_fences(text)
    prose = INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    misses = []
    for m in LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        line = prose.count("\n", 0, m.start()) + 1
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            misses.append(Miss(_rel(doc), line, f"link target {target!r} does not exist"))
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            misses.append(Miss(_rel(doc), line, f"link {target!r}: no heading #{anchor} in {_rel(dest)}"))
    return misses


def all_snippets() -> list[Snippet]:
    return [s for doc in docs() for s in snippets(doc.read_text(), _rel(doc))]


def path_misses(items: list[Snippet]) -> list[Miss]:
    return [Miss(s.doc, s.line, f"path {p!r} does not exist in the repository")
            for s in items for p in path_candidates(s.text) if not (REPO / p).exists()]


def make_misses(items: list[Snippet], targets: set[str]) -> list[Miss]:
    return [Miss(s.doc, s.line, f"`make {t}`: no such target in the Makefile")
            for s in items for t in make_targets_named(s.text) if t not in targets]


def pdfleet_misses(items: list[Snippet], parser: argparse.ArgumentParser) -> list[Miss]:
    top = _subparsers(parser) or {}
    misses = []
    for s in items:
        for sub, nxt in pdfleet_commands(s.text):
            if sub not in top:
                misses.append(Miss(s.doc, s.line, f"`pdfleet {sub}`: not a pdfleet subcommand "
                                                  f"({', '.join(sorted(top))})"))
                continue
            nested = _subparsers(top[sub])
            if nested is not None and nxt and nxt not in nested:
                misses.append(Miss(s.doc, s.line, f"`pdfleet {sub} {nxt}`: not a subcommand of pdfleet {sub} "
                                                  f"({', '.join(sorted(nested))})"))
    return misses


def playbook_misses(items: list[Snippet]) -> list[Miss]:
    return [Miss(s.doc, s.line, f"ansible-playbook {p}: not a playbook of this repository")
            for s in items for p in playbooks_named(s.text) if not is_playbook(REPO / p)]


def _report(misses: list[Miss]) -> str:
    return f"{len(misses)} missing:\n" + "\n".join(map(str, misses))


# --- the docs ------------------------------------------------------------------------------------------------


def test_the_docs_exist_and_say_something():
    found = docs()
    assert (REPO / "README.md").is_file()
    assert len(found) >= 6, [_rel(d) for d in found]
    items = all_snippets()
    # The checks below read something: a doc set without code spans, commands or paths would pass vacuously.
    assert sum(len(path_candidates(s.text)) for s in items) > 100
    assert sum(len(pdfleet_commands(s.text)) for s in items) > 20
    assert sum(len(make_targets_named(s.text)) for s in items) >= 3
    assert sum(len(playbooks_named(s.text)) for s in items) >= 5


def test_links_resolve():
    misses = [m for doc in docs() for m in link_misses(doc)]
    assert not misses, _report(misses)


def test_named_paths_exist():
    misses = path_misses(all_snippets())
    assert not misses, _report(misses)


def test_make_targets_exist():
    misses = make_misses(all_snippets(), makefile_targets(REPO / "Makefile"))
    assert not misses, _report(misses)


def test_pdfleet_subcommands_exist():
    from pdfleet.cli import build_parser

    misses = pdfleet_misses(all_snippets(), build_parser())
    assert not misses, _report(misses)


def test_playbooks_exist():
    misses = playbook_misses(all_snippets())
    assert not misses, _report(misses)


def test_readme_keeps_the_two_commands_first():
    """CI (.ci/run) and the Makefile's header name them: the first shell block's commands are make site, make test."""
    _, blocks = split_fences((REPO / "README.md").read_text())
    first = next(body for _, lang, body in blocks if lang in SHELL_LANGS)
    commands = [re.split(r"\s#", line)[0].strip() for line in first.splitlines() if line.strip()]
    assert commands[:2] == ["make site", "make test"], first


# --- the extractor on small strings --------------------------------------------------------------------------


def test_snippets_read_inline_code_and_shell_commands_not_yaml_or_comments():
    text = ("Run `make site` first, then\n`ansible-playbook\nsite.yml`.\n\n```sh\n.venv/bin/pdfleet plan -i x  "
            "# see tests/nothing.py\n\n```\n\n```yaml\npath: ansible/nothing.yml\n```\n")
    got = list(snippets(text, "d.md"))
    assert [(s.line, s.text, s.block) for s in got] == [
        (1, "make site", False), (2, "ansible-playbook\nsite.yml", False), (6, ".venv/bin/pdfleet plan -i x", True)]


def test_path_candidates_rule():
    text = ("tests/docs/test_docs.py site.yml ansible/roles/ /etc/pdfleet/secrets.env https://x.org/a.json "
            "<inventory>/hosts.yml reports/verify.json .cache/runtime sglang/srt/environ.py inventory/prod "
            "--plan=inventory/sim/hosts.yml PDFLEET_BASELINE_FILE=inventory/x/baselines.json nvidia-* "
            "pdfleet.verify.signatures secrets.env (scripts/pdfleet/), / a/b... PYTEST_ARGS='tests/plan -x' "
            "pdfleet-plan/1")
    assert path_candidates(text) == ["tests/docs/test_docs.py", "site.yml", "ansible/roles/",
                                     "inventory/sim/hosts.yml", "inventory/x/baselines.json", "scripts/pdfleet/",
                                     "a/", "tests/plan"]
    # a placeholder path: only its fixed leading folders
    assert path_candidates("ansible/roles/<role>/meta/x.yml <venv>/pdfleet-record.json inventory/examples/* "
                           "a/b/{c,d}.yml x-<time>.json") == ["ansible/roles/", "inventory/examples/", "a/b/"]


def test_make_and_pdfleet_and_playbook_extractors():
    assert make_targets_named("make test; make  test-long && (make lint) remake x") == ["test", "test-long", "lint"]
    assert pdfleet_commands(".venv/bin/pdfleet sim up -i x; pdfleet plan --json; pdfleet-watchdog status; "
                            "pdfleet_units x; python -m pdfleet_sim.cli sim up") == [("sim", "up"), ("plan", "")]
    assert playbooks_named(".venv/bin/ansible-playbook -i inventory/sim-mono/x.yml -e @vars.yml site.yml "
                           "--check; ansible-playbook rollout.yml") == ["site.yml", "rollout.yml"]


def test_checks_name_every_miss_with_file_and_line():
    items = list(snippets("ok `site.yml` and `no/such/file.py`\nthen `make nosuch` and `make test`\n\n"
                          "```sh\npdfleet nosuch\npdfleet sim nosuch\nansible-playbook -i inventory/sim Makefile.yml"
                          " pyproject.toml\nansible-playbook ansible/playbooks/vars/deploy.yml\n```\n", "d.md"))
    assert [str(m) for m in path_misses(items)] == [
        "d.md:1: path 'no/such/file.py' does not exist in the repository",
        "d.md:7: path 'Makefile.yml' does not exist in the repository"]
    assert [str(m) for m in make_misses(items, makefile_targets(REPO / "Makefile"))] == [
        "d.md:2: `make nosuch`: no such target in the Makefile"]
    from pdfleet.cli import build_parser

    got = [str(m).split(" (")[0] for m in pdfleet_misses(items, build_parser())]
    assert got == ["d.md:5: `pdfleet nosuch`: not a pdfleet subcommand",
                   "d.md:6: `pdfleet sim nosuch`: not a subcommand of pdfleet sim"]
    # a vars file is YAML but not a playbook
    assert [str(m) for m in playbook_misses(items)] == [
        "d.md:7: ansible-playbook Makefile.yml: not a playbook of this repository",
        "d.md:8: ansible-playbook ansible/playbooks/vars/deploy.yml: not a playbook of this repository"]


def test_makefile_targets_and_playbook_shape():
    targets = makefile_targets(REPO / "Makefile")
    assert {"site", "test", "test-long", "setup", "lint", "clean-sim"} <= targets
    assert not any(t.startswith((".", "$")) for t in targets)
    assert is_playbook(REPO / "site.yml") and is_playbook(REPO / "ansible/playbooks/preflight.yml")
    assert not is_playbook(REPO / "inventory/sim/hosts.yml")


def test_links_and_anchors(tmp_path: Path):
    (tmp_path / "a.md").write_text("# Top\n\n## The `pdfleet` CLI: plan\n\nsee [b](b.md#there), [c](c.md), "
                                   "[up](#the-pdfleet-cli-plan), [bad](#nowhere), [web](https://x.org)\n"
                                   "`[not](a/link.md)`\n")
    (tmp_path / "b.md").write_text("# Here\n")
    got = [m.what for m in link_misses(tmp_path / "a.md")]
    assert got == ["link 'b.md#there': no heading #there in " + str(tmp_path / "b.md"),
                   "link target 'c.md' does not exist", "link '#nowhere': no heading #nowhere in "
                   + str(tmp_path / "a.md")]


@pytest.mark.parametrize("heading,expected", [("What `make test` proves (CI)", "what-make-test-proves-ci"),
                                              ("Crash recovery: the prefill hold-down",
                                               "crash-recovery-the-prefill-hold-down")])
def test_slug(heading: str, expected: str):
    assert slug(heading) == expected
