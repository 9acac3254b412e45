"""Re-derive a pin's hardware facts from the pinned wheel's own source, to check its manifest's ``hardware``.

Each probe reads the conditions one fact of ``manifest.yml``'s ``hardware`` section rests on (the environ.py
default, the branch that reads it, the guard a later version adds, the dependency pin) from a source tree: a
runtime overlay (``overlay-<version>/``), a wheel, or a doctored copy. It answers whether the fact is needed
and with which value, and raises :class:`ProbeError` when the code it reads is no longer shaped as expected:
then a human re-reads the file and decides. :func:`check_hardware` compares the probes with a manifest.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pdfleet.errors import PdfleetError
from pdfleet.patch.manifest import PatchManifest

SM120 = "12.0"
ENVIRON = "sglang/srt/environ.py"
DSV4_BACKEND = "sglang/srt/layers/attention/deepseek_v4_backend.py"
DSV4_METADATA = "sglang/srt/layers/attention/dsv4/metadata.py"
THRESHOLD = "_LARGE_INDEXER_QUERY_THRESHOLD"
CHUNKED_PREFILL = "--chunked-prefill-size"
SPARSE_PREFILL = "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL"
DECODE_BACKEND = "SGLANG_SM120_FLASHMLA_BACKEND"
FLASHINFER_SM120_MODULE = "flashinfer.mla._sparse_mla_sm120"
_SM120_WORD = re.compile(r"sm_?120", re.IGNORECASE)


class ProbeError(PdfleetError):
    """The source no longer has the shape a fact's condition was read from: re-read it and decide."""


class SourceTree:
    """The files of an installed or unpacked wheel (paths like ``sglang/srt/environ.py``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._zip = zipfile.ZipFile(root) if root.is_file() else None
        self._names = self._zip.namelist() if self._zip else None

    def read(self, rel: str) -> str | None:
        if self._zip is not None:
            try:
                return self._zip.read(rel).decode("utf-8")
            except KeyError:
                return None
        path = self.root / rel
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def find(self, filename: str, under: str = "sglang") -> list[str]:
        """Paths of every file whose name matches ``filename`` (a glob) under ``under`` (sorted)."""
        if self._names is not None:
            return sorted(n for n in self._names
                          if n.startswith(under + "/") and fnmatch.fnmatchcase(n.rsplit("/", 1)[-1], filename))
        return sorted(str(p.relative_to(self.root)) for p in (self.root / under).rglob(filename))

    def metadata(self) -> str | None:
        if self._names is not None:
            found = [n for n in self._names if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n)]
        else:
            found = [str(p.relative_to(self.root)) for p in self.root.glob("sglang-*.dist-info/METADATA")]
        return self.read(found[0]) if found else None


@dataclass(frozen=True)
class Verdict:
    """What the source says about one environment variable on SM120."""

    name: str
    needed: bool
    value: str | None  # the value to set when needed
    file: str  # where the deciding condition lives
    evidence: str


# flashinfer_python version -> does its wheel ship FLASHINFER_SM120_MODULE (a callable reads the wheel)
FlashinferLookup = Callable[[str], bool]


def _parse(tree: SourceTree, rel: str) -> ast.Module:
    text = tree.read(rel)
    if text is None:
        raise ProbeError(f"{rel} is not in {tree.root}: the file a hardware fact rests on moved or went away")
    return ast.parse(text, filename=rel)


def env_default(tree: SourceTree, name: str) -> tuple[str, object]:
    """``(EnvBool|EnvStr|..., default)`` of ``name = EnvX(default)`` in environ.py."""
    for node in ast.walk(_parse(tree, ENVIRON)):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.args and isinstance(node.value.args[0], ast.Constant)):
            return node.value.func.id, node.value.args[0].value
    raise ProbeError(f"{ENVIRON} no longer declares `{name} = EnvX(<constant>)`")


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == name for n in ast.walk(node))


def _has_not_sm120(node: ast.AST) -> bool:
    return any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) and _SM120_WORD.search(ast.unparse(n.operand))
               for n in ast.walk(node))


def _conditions_reading(module: ast.Module, name: str) -> list[ast.expr]:
    """The whole conditions (an ``if`` test, a returned boolean) that read ``envs.<name>``."""
    out: list[ast.expr] = []
    for node in ast.walk(module):
        expr = node.test if isinstance(node, ast.If | ast.IfExp | ast.While) else (
            node.value if isinstance(node, ast.Return) and node.value is not None else None)
        if expr is not None and _mentions(expr, name):
            out.append(expr)
    return out


def _sm120_switch_off(tree: SourceTree, name: str) -> str | None:
    """A hook that sets ``envs.<name>`` False under an SM120 test (arg_groups/, server_args.py), if any."""
    for rel in [*tree.find("*.py", "sglang/srt/arg_groups"), "sglang/srt/server_args.py"]:
        text = tree.read(rel)
        if text is None or name not in text:
            continue
        for node in ast.walk(ast.parse(text, filename=rel)):
            test = node.test if isinstance(node, ast.If) else None
            if test is not None and _SM120_WORD.search(ast.unparse(test)) and not _has_not_sm120(test):
                body = ast.Module(body=node.body, type_ignores=[])
                if _mentions(body, name) and re.search(rf"{name}\.set\(False\)", ast.unparse(body)):
                    return f"{rel}: `if {ast.unparse(node.test)}:` sets {name} False"
    return None


def probe_sparse_prefill(tree: SourceTree, _flashinfer: FlashinferLookup) -> Verdict:
    kind, default = env_default(tree, SPARSE_PREFILL)
    if kind != "EnvBool":
        raise ProbeError(f"{ENVIRON}: {SPARSE_PREFILL} is now {kind}({default!r}), not an EnvBool")
    module = _parse(tree, DSV4_BACKEND)
    text = ast.unparse(module)
    if "_forward_prefill_sparse" not in text or "flash_mla_sparse_fwd" not in text:
        raise ProbeError(f"{DSV4_BACKEND} no longer has _forward_prefill_sparse -> flash_mla_sparse_fwd")
    conditions = _conditions_reading(module, SPARSE_PREFILL)
    if not conditions:
        raise ProbeError(f"{DSV4_BACKEND}: no condition reads envs.{SPARSE_PREFILL} any more")
    unguarded = [c for c in conditions if not _has_not_sm120(c)]
    hook = _sm120_switch_off(tree, SPARSE_PREFILL)
    if not default:
        return Verdict(SPARSE_PREFILL, False, None, ENVIRON, f"{ENVIRON} defaults it to EnvBool(False)")
    if hook:
        return Verdict(SPARSE_PREFILL, False, None, hook.split(":")[0], hook)
    if not unguarded:
        return Verdict(SPARSE_PREFILL, False, None, DSV4_BACKEND,
                       f"every condition reading it has an SM120 guard: {ast.unparse(conditions[0])}")
    return Verdict(SPARSE_PREFILL, True, "0", DSV4_BACKEND,
                   f"EnvBool(True) in {ENVIRON}; no SM120 guard in `{ast.unparse(unguarded[0])}`")


def _flashinfer_pin(tree: SourceTree) -> str:
    meta = tree.metadata()
    found = re.search(r"^Requires-Dist: flashinfer[_-]python(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)", meta or "", re.M)
    if found is None:
        raise ProbeError(f"the sglang METADATA in {tree.root} no longer pins flashinfer_python==X")
    return found.group(1)


def probe_decode_backend(tree: SourceTree, flashinfer: FlashinferLookup) -> Verdict:
    kind, default = env_default(tree, DECODE_BACKEND)
    if kind != "EnvStr":
        raise ProbeError(f"{ENVIRON}: {DECODE_BACKEND} is now {kind}({default!r}), not an EnvStr")
    files = tree.find("flash_mla_sm120.py")
    if len(files) != 1:
        raise ProbeError(f"expected one flash_mla_sm120.py in {tree.root}, found {files or 'none'}")
    module = _parse(tree, files[0])
    choices = {c.value for n in ast.walk(module) if isinstance(n, ast.Compare) for c in n.comparators
               if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    if not {"flashinfer", "triton"} <= choices:
        raise ProbeError(f"{files[0]} no longer dispatches on 'flashinfer' and 'triton' (found {sorted(choices)})")
    imports = {n.module for n in ast.walk(module) if isinstance(n, ast.ImportFrom)}
    if FLASHINFER_SM120_MODULE not in imports:
        raise ProbeError(f"{files[0]} no longer imports {FLASHINFER_SM120_MODULE}")
    if default != "flashinfer":
        return Verdict(DECODE_BACKEND, False, None, ENVIRON, f"{ENVIRON} defaults it to {default!r}")
    pin = _flashinfer_pin(tree)
    if flashinfer(pin):
        return Verdict(DECODE_BACKEND, False, None, files[0],
                       f"flashinfer_python=={pin} (the wheel's pin) ships {FLASHINFER_SM120_MODULE}")
    return Verdict(DECODE_BACKEND, True, "triton", files[0],
                   f"default 'flashinfer' imports {FLASHINFER_SM120_MODULE}, which flashinfer_python=={pin} "
                   "(the wheel's pin) does not ship; 'triton' is flash_mla_sm120_triton.py's kernel")


@dataclass(frozen=True)
class LimitVerdict:
    """What the source says about the largest value a server argument may take on SM120."""

    flag: str
    needed: bool
    max: int | None
    file: str
    evidence: str


def probe_chunked_prefill_limit(tree: SourceTree, _flashinfer: FlashinferLookup) -> LimitVerdict:
    """A sparse-prefill condition that also fires on batch size (`q.shape[0] > THRESHOLD`) without an SM120 guard
    takes the kernel SM120 lacks whatever the env says; --chunked-prefill-size bounds an extend batch."""
    sized = [c for c in _conditions_reading(_parse(tree, DSV4_BACKEND), SPARSE_PREFILL) if THRESHOLD in ast.unparse(c)]
    if not sized:
        raise ProbeError(f"{DSV4_BACKEND}: no sparse-prefill condition compares the batch with {THRESHOLD} any more")
    unguarded = [c for c in sized if not _has_not_sm120(c)]
    if not unguarded:
        return LimitVerdict(CHUNKED_PREFILL, False, None, DSV4_BACKEND,
                            f"the size condition has an SM120 guard: {ast.unparse(sized[0])}")
    for node in ast.walk(_parse(tree, DSV4_METADATA)):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == THRESHOLD for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)):
            return LimitVerdict(CHUNKED_PREFILL, True, node.value.value, DSV4_BACKEND,
                                f"`{ast.unparse(unguarded[0])}` has no SM120 guard; {THRESHOLD} = "
                                f"{node.value.value} in {DSV4_METADATA}")
    raise ProbeError(f"{DSV4_METADATA} no longer assigns {THRESHOLD} an integer")


LIMIT_PROBES: dict[str, Callable[[SourceTree, FlashinferLookup], LimitVerdict]] = {
    CHUNKED_PREFILL: probe_chunked_prefill_limit,
}


# Every environment variable a manifest may set on SM120, and the probe that decides it.
PROBES: dict[str, Callable[[SourceTree, FlashinferLookup], Verdict]] = {
    SPARSE_PREFILL: probe_sparse_prefill,
    DECODE_BACKEND: probe_decode_backend,
}


def flashinfer_wheel_has_sm120_module(wheel: Path) -> bool:
    """Does this flashinfer_python wheel ship ``flashinfer/mla/_sparse_mla_sm120`` (module or package)?"""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    return bool({"flashinfer/mla/_sparse_mla_sm120.py", "flashinfer/mla/_sparse_mla_sm120/__init__.py"} & names)


def check_hardware(manifest: PatchManifest, tree: SourceTree, flashinfer: FlashinferLookup) -> list[str]:
    """Where ``manifest``'s SM120 facts disagree with the source (empty: they agree); ProbeError when a
    condition can no longer be read."""
    where = f"SGLang {manifest.version} manifest.yml hardware.\"{SM120}\""
    if manifest.hardware is None or SM120 not in manifest.hardware:
        return [f"{where} is missing: every pin must say what it needs on SM120 (an empty env list, with "
                "findings, when nothing)"]
    facts = {f.name: f for f in manifest.hardware[SM120].env}
    problems = [f"{where}: {name} has no probe in pdfleet.patch.hwprobe.PROBES; add one that reads its condition"
                for name in facts if name not in PROBES]
    for name, probe in PROBES.items():
        verdict = probe(tree, flashinfer)
        fact = facts.get(name)
        if verdict.needed and fact is None:
            problems.append(f"{where}: {name}={verdict.value} is needed ({verdict.file}: {verdict.evidence}) but "
                            "not listed")
        elif not verdict.needed and fact is not None:
            problems.append(f"{where}: {name}={fact.value} is no longer needed ({verdict.evidence}); remove it "
                            "and say why in findings")
        elif fact is not None and (fact.value != verdict.value or fact.file != verdict.file):
            problems.append(f"{where}: {name} says {fact.value!r} from {fact.file}, the source says "
                            f"{verdict.value!r} from {verdict.file}")
    limits = {lim.flag: lim for lim in manifest.hardware[SM120].limits}
    problems += [f"{where}: the limit on {flag} has no probe in pdfleet.patch.hwprobe.LIMIT_PROBES"
                 for flag in limits if flag not in LIMIT_PROBES]
    for flag, limit_probe in LIMIT_PROBES.items():
        lv = limit_probe(tree, flashinfer)
        lim = limits.get(flag)
        if lv.needed and lim is None:
            problems.append(f"{where}: a limit {flag} <= {lv.max} is needed ({lv.file}: {lv.evidence}) but not listed")
        elif not lv.needed and lim is not None:
            problems.append(f"{where}: the limit {flag} <= {lim.max} is no longer needed ({lv.evidence}); remove it")
        elif lim is not None and (lim.max != lv.max or lim.file != lv.file):
            problems.append(f"{where}: the limit says {flag} <= {lim.max} from {lim.file}, the source says "
                            f"<= {lv.max} from {lv.file}")
    return problems
