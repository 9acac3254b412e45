"""The SGLang side of the launch check: runs inside the CPU runtime (``base/bin/python`` + an overlay).

Reads one job (JSON) on standard input and writes the result (JSON) on standard output:

* every worker command is parsed with the pinned SGLang's own parser (``ServerArgs.add_cli_args`` on an
  ``argparse`` parser, as ``prepare_server_args`` builds it), every router command with the router's own
  (``RouterArgs.add_cli_args``, as ``smg.launch_router.parse_router_args`` builds it);
* each worker that parses is then resolved by SGLang itself (``ServerArgs`` post-init, or
  ``resolve_once`` on versions that resolve lazily) in a forked child with the unit's environment set, the
  model path pointing at a ``config.json`` of the model, and the device reported as the host spec's GPU
  (:mod:`pdfleet.launchcheck.sm120`). Where resolution raises (a step needs a real GPU), the result says
  at which SGLang function and why.

Invoked by :mod:`pdfleet.launchcheck.check`; not meant to be run by hand (``pdfleet launchcheck`` is).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from pdfleet.launchcheck import sm120

SETTINGS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend", "moe_runner_backend",
            "kv_cache_dtype", "page_size", "max_running_requests", "chunked_prefill_size", "max_prefill_tokens",
            "mem_fraction_static", "disable_cuda_graph", "cuda_graph_max_bs_decode", "cuda_graph_max_bs",
            "quantization", "tp_size", "dp_size")
SPARSE_ENV = "SGLANG_OPT_FLASHMLA_SPARSE_PREFILL"
THRESHOLD = "_LARGE_INDEXER_QUERY_THRESHOLD"  # extend batches above it take the sparse path whatever the env says


class ArgumentRefused(Exception):
    """The launcher's parser refused the command line (argparse would exit 2 with this message)."""


class _RefusingParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise ArgumentRefused(message)


def _server_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = _RefusingParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _router_parser() -> argparse.ArgumentParser:
    """The pinned router package's own parser: smg's, else sglang-router's (whichever the runtime holds)."""
    try:
        from smg.router_args import RouterArgs
        prog = "smg.launch_router"
    except ImportError:
        from sglang_router.router_args import RouterArgs  # type: ignore[no-redef]
        prog = "sglang_router.launch_router"

    parser = _RefusingParser(prog=prog)
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, str, list[str]]:
    """(namespace or None, refusal message, what the parser printed: SGLang's deprecation notes)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            ns = parser.parse_args(argv)
    except ArgumentRefused as e:
        return None, str(e), []
    notes = [line.strip().replace("\x1b[1;33m", "").replace("\x1b[0m", "") for line in out.getvalue().splitlines()]
    return ns, "", [n for n in notes if n]


def _sparse_condition() -> dict[str, Any]:
    """When SGLang's DeepSeek-V4 backend takes the FlashMLA sparse prefill: read from the wheel's own source
    (importing the backend needs GPU libraries), not assumed."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    root = Path(next(iter(spec.submodule_search_locations or [])) if spec else "")
    backend = root / "srt/layers/attention/deepseek_v4_backend.py"
    metadata = root / "srt/layers/attention/dsv4/metadata.py"
    if not backend.is_file():
        return {"error": f"{backend} is not in this SGLang"}
    found = ""
    for node in ast.walk(ast.parse(backend.read_text(encoding="utf-8"))):
        if isinstance(node, ast.BoolOp):
            text = ast.unparse(node)
            if SPARSE_ENV in text and len(text) > len(found):
                found = text
    threshold = None
    if metadata.is_file():
        for node in ast.parse(metadata.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and any(isinstance(t, ast.Name) and t.id == THRESHOLD for t in node.targets)):
                threshold = int(node.value.value)
    if not found:
        return {"error": f"{backend.name} no longer tests {SPARSE_ENV}: read it and update pdfleet.launchcheck"}
    return {"file": "sglang/srt/layers/attention/deepseek_v4_backend.py", "condition": found,
            "sm120_guard": "is_sm120" in found, "large_extend_threshold": threshold}


def _is_sm120() -> bool:
    try:
        from sglang.srt.platforms import get_platform  # newer versions

        return bool(get_platform().is_sm120)
    except (ImportError, AttributeError):
        from sglang.srt.utils.common import is_sm120_supported

        return bool(is_sm120_supported())


def _sparse_prefill(settings: dict[str, Any], cond: dict[str, Any]) -> tuple[str, str]:
    from sglang.srt.environ import envs

    env_on = bool(getattr(envs, SPARSE_ENV).get())
    if "error" in cond:
        return "unknown", cond["error"]
    if cond["sm120_guard"] and _is_sm120():
        return "off", f"SGLang's own SM120 guard ({cond['file']})"
    if env_on:
        return "on", f"{SPARSE_ENV} is on (after SGLang's hooks)"
    threshold, chunk = cond["large_extend_threshold"], settings.get("chunked_prefill_size")
    if threshold and isinstance(chunk, int) and 0 < chunk <= threshold:
        return "off", (f"{SPARSE_ENV}=0, and extend batches (at most chunked_prefill_size={chunk} tokens) stay "
                       f"under the large-batch threshold {threshold}")
    return "large-batches", f"{SPARSE_ENV}=0, but extend batches over {threshold} tokens still take it"


def _failing_step(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/sglang/" in f.filename]
    where = f"{frames[-1].name} ({frames[-1].filename.split('/sglang/', 1)[-1]}:{frames[-1].lineno})" if frames else "?"
    return f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _resolve(ns: argparse.Namespace, env: dict[str, str], cond: dict[str, Any]) -> dict[str, Any]:
    """Run SGLang's resolution on `ns` with `env` set (call in a forked child)."""
    from sglang.srt.server_args import ServerArgs

    os.environ.update(env)
    out: dict[str, Any] = {"settings": {}, "stopped_at": None}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            args = ServerArgs.from_cli_args(ns)
            view: Any = args
            if hasattr(args, "resolve_once"):
                args.resolve_once()
                from sglang.srt.arg_groups.overrides import resolving_view

                view = resolving_view(args)
    except Exception as e:
        out["stopped_at"] = _failing_step(e)
        return out
    for name in SETTINGS:
        try:
            value = getattr(view, name)
        except AttributeError:
            continue
        out["settings"][name] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
    state, why = _sparse_prefill(out["settings"], cond)
    from sglang.srt.environ import envs

    out["settings"]["sparse_prefill"] = state
    out["settings"]["sparse_prefill_reason"] = why
    out["settings"]["sm120_flashmla_backend"] = str(envs.SGLANG_SM120_FLASHMLA_BACKEND.get())
    return out


def _in_child(fn: Any, *args: Any) -> dict[str, Any]:
    """fn(*args) in a forked child (SGLang keeps process-wide state), its JSON result read back over a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            data = json.dumps(fn(*args)).encode()
        except BaseException as e:
            data = json.dumps({"settings": {}, "stopped_at": f"{type(e).__name__}: {e}"}).encode()
        with os.fdopen(write, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"settings": {}, "stopped_at": "the resolving child died"}


def run(job: dict[str, Any]) -> dict[str, Any]:
    host = job["device"]
    sm120.install(host["gpu_model"], host["compute_capability"], int(host["gpu_memory_mib"]), int(host["gpu_count"]))
    import sglang

    server = _server_parser()
    router: argparse.ArgumentParser | None = None
    cond: dict[str, Any] | None = None
    results: dict[str, Any] = {}
    for unit in job["units"]:
        res: dict[str, Any] = {"parsed": False, "refused": "", "notes": []}
        if unit["kind"] == "router":
            try:
                router = router or _router_parser()
            except ImportError as e:
                res["refused"] = f"cannot import the router's parser ({e}): is the pinned router in the runtime?"
                results[unit["id"]] = res
                continue
            ns, res["refused"], res["notes"] = _parse(router, unit["args"])
            res["parsed"] = ns is not None
        else:
            ns, res["refused"], res["notes"] = _parse(server, unit["args"])
            res["parsed"] = ns is not None
            if ns is not None and job.get("resolve", True):
                cond = cond if cond is not None else _sparse_condition()
                res |= _in_child(_resolve, ns, unit["env"], cond)
                res["sparse_condition"] = cond.get("condition", "")
        results[unit["id"]] = res
    return {"sglang": sglang.__version__, "units": results}


def main() -> int:
    """``python -m pdfleet.launchcheck.probe OUT.json`` with the job on stdin (SGLang logs to stdout/stderr)."""
    job = json.load(sys.stdin)
    result = run(job)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
