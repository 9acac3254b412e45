"""``pdfleet verify``: the verification protocol as a command (wired in by ``pdfleet.cli``).

    pdfleet verify [-i INVENTORY] [--report FILE]                     # against an inventory's plan
    pdfleet verify --router URL --prefill URL --decode URL --log-file prefill=P --log-file decode=D
    pdfleet verify -i INV --defer-logs --report R                     # Ansible: traffic now, logs later
    pdfleet verify --resume R --journal-dir DIR --report R            # … then the logs, and the verdict

Exit codes: 0 pass, 1 a check failed, 2 could not run (unreachable, bad arguments), inconclusive, or
incomplete (the cascade or logs evidence was left out; ``--allow-incomplete`` accepts that).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from pdfleet.errors import PdfleetError
from pdfleet.inventory_flags import add_inventory_arguments, source_from_args
from pdfleet.paths import DEFAULT_INVENTORY
from pdfleet.plandoc import read_plan_document
from pdfleet.routerkey import find_key
from pdfleet.verify import client, journaldump, targets
from pdfleet.verify.logs import FileLogs, JournalDirLogs, LogSource, SSHJournalLogs
from pdfleet.verify.protocol import resume_with_journals, run_protocol
from pdfleet.verify.report import Report, writable_problem
from pdfleet.verify.result import CHECK_NAMES
from pdfleet.verify.settings import KILL_MODES, Settings


class VerifyUsageError(PdfleetError):
    """Bad arguments for `pdfleet verify` (exit 2)."""


def _positive(kind: type) -> Any:
    def conv(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text}: must be above 0")
        return value
    return conv


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: must be between 0 and 1")
    return value


def _non_negative(kind: type) -> Any:
    def conv(text: str) -> Any:
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text}: must be 0 or more")
        return value
    return conv


def _add_target_args(p: argparse.ArgumentParser) -> None:
    add_inventory_arguments(p, f"inventory to plan the target from, repeatable (default: {DEFAULT_INVENTORY.name} "
                               "when neither --plan nor --router is given)")
    g = p.add_argument_group("target (an inventory, a plan document, or explicit URLs)")
    g.add_argument("--plan", type=Path, help="a plan document (pdfleet plan --json; - reads it from standard input, "
                   "as the verification play hands over the preflight's) instead of planning the inventory again")
    g.add_argument("--router", help="router URL (explicit mode, e.g. a LocalPD on 127.0.0.1)")
    g.add_argument("--prefill", action="append", default=[], help="prefill worker URL (repeatable)")
    g.add_argument("--decode", action="append", default=[], help="decode worker URL (repeatable)")
    g.add_argument("--expect-model", help="explicit mode: the served model name the workers must report")
    g.add_argument("--expect-version", help="explicit mode: the SGLang version the workers must report")
    g.add_argument("--expect-tp", type=_positive(int), help="explicit mode: the tp size of every worker")
    g.add_argument("--profile", default=None, help="profile name for the benchmark baseline (explicit mode)")
    g.add_argument("--api-key-file", type=Path, metavar="FILE",
                   help="the router's API key (router.api_key: true): a 0600 file holding the key or an env file "
                        "line PDFLEET_ROUTER_API_KEY=<key> (default: $PDFLEET_ROUTER_API_KEY); sent to the router "
                        "only, never written to the report")


def _add_check_args(p: argparse.ArgumentParser, d: Settings) -> None:
    pos_f, pos_i, nn_f = _positive(float), _positive(int), _non_negative(float)
    g = p.add_argument_group("1-2. config gate and deep liveness")
    g.add_argument("--http-timeout", dest="http_timeout_s", type=pos_f, default=d.http_timeout_s)
    g.add_argument("--liveness-prompt", default=d.liveness_prompt)
    g.add_argument("--liveness-max-tokens", type=pos_i, default=d.liveness_max_tokens)
    g.add_argument("--liveness-deadline", dest="liveness_deadline_s", type=pos_f, default=d.liveness_deadline_s)
    g = p.add_argument_group("3. abort cascades")
    g.add_argument("--cycles", type=_non_negative(int), default=d.cycles)
    g.add_argument("--concurrency", "-C", type=pos_i, default=d.concurrency,
                   help="sessions per prefill worker (a fleet of N prefills opens N x this)")
    g.add_argument("--window", dest="window_s", type=nn_f, default=d.window_s, help="seconds before the kill")
    g.add_argument("--kill-mode", choices=KILL_MODES, default=d.kill_mode)
    g.add_argument("--cascade-prompt-words", type=_non_negative(int), default=d.cascade_prompt_words)
    g.add_argument("--cascade-max-tokens", type=pos_i, default=d.cascade_max_tokens)
    g.add_argument("--pause", dest="pause_s", type=nn_f, default=d.pause_s,
                   help="at most this many seconds between cycles (ends once every worker's queues are empty)")
    g.add_argument("--settle", dest="settle_s", type=nn_f, default=d.settle_s,
                   help="at most this many seconds after the last kill before recovery (ends once every worker's "
                        "queues are empty)")
    g.add_argument("--kill-fin", dest="kill_rst", action="store_false",
                   help="close killed sessions with FIN instead of RST")
    g.add_argument("--seed", type=int, default=d.seed)
    g = p.add_argument_group("4. recovery")
    g.add_argument("--health-max", dest="health_max_s", type=pos_f, default=d.health_max_s)
    g.add_argument("--recovery-deadline", dest="recovery_deadline_s", type=pos_f, default=d.recovery_deadline_s)
    g.add_argument("--probe-concurrency", type=pos_i, default=d.probe_concurrency)
    g.add_argument("--probe-max-tokens", type=pos_i, default=d.probe_max_tokens)
    g.add_argument("--probe-deadline", dest="probe_deadline_s", type=pos_f, default=d.probe_deadline_s)
    g.add_argument("--idle-deadline", dest="idle_deadline_s", type=pos_f, default=d.idle_deadline_s)
    g = p.add_argument_group("5. logs")
    g.add_argument("--log-file", action="append", default=[], metavar="WORKER=PATH",
                   help="a worker's local log file (explicit mode: WORKER is prefill/decode)")
    g.add_argument("--journal-dir", type=Path, help="journal dumps collected by Ansible (<dir>/<host>/<unit>.log)")
    g.add_argument("--defer-logs", action="store_true", help="leave the logs check for a --resume run")
    g.add_argument("--resume", type=Path, help="a --defer-logs report to finish with --journal-dir")
    g.add_argument("--journals-from-stdin", action="store_true",
                   help="with --resume: first write the journal dumps on standard input (the verification play's "
                        "collection, {HOST: {UNIT: ...}}) into --journal-dir, then scan them")
    g.add_argument("--min-abort-events", type=_non_negative(int), default=d.min_abort_events,
                   help="ABORT messages the prefill must have handled (0: INCOMPLETE unless --allow-incomplete)")
    g.add_argument("--min-abort-share", type=_share, default=d.min_abort_share,
                   help="PD: handled ABORTs needed per session killed before its first token (0-1; default "
                        "%(default)s): fewer is INCONCLUSIVE")
    g.add_argument("--allow-dropped-frames", action="store_true",
                   help="count 'unexpected leading frame' warnings without failing")
    g = p.add_argument_group("6. benchmark")
    g.add_argument("--bench-requests", type=pos_i, default=d.bench_requests)
    g.add_argument("--bench-concurrency", type=pos_i, default=d.bench_concurrency)
    g.add_argument("--bench-prompt-words", type=_non_negative(int), default=d.bench_prompt_words)
    g.add_argument("--bench-max-tokens", type=pos_i, default=d.bench_max_tokens)
    g.add_argument("--bench-deadline", dest="bench_deadline_s", type=pos_f, default=d.bench_deadline_s)
    g.add_argument("--bench-tool", choices=("pdfleet", "sglang"), default=d.bench_tool)
    g.add_argument("--bench-python", default=d.bench_python, help="interpreter with sglang (--bench-tool sglang)")
    g.add_argument("--bench-tokenizer", default=d.bench_tokenizer, help="local tokenizer path (--bench-tool sglang)")
    g.add_argument("--baseline-file", type=Path, default=d.baseline_file)
    g.add_argument("--save-baseline", action="store_true")
    g.add_argument("--tol-throughput", type=nn_f, default=d.tol_throughput)
    g.add_argument("--tol-ttft", type=nn_f, default=d.tol_ttft)
    g.add_argument("--tol-tpot", type=nn_f, default=d.tol_tpot)
    g = p.add_argument_group("output")
    g.add_argument("--skip", action="append", default=[], choices=CHECK_NAMES, help="skip a check (repeatable)")
    g.add_argument("--report", type=Path, help="write the JSON verdict here")
    g.add_argument("--allow-incomplete", action="store_true",
                   help="accept a run without the cascade/logs evidence (0 cycles, --skip cascade|logs, "
                        "--min-abort-events 0) instead of exiting 2 INCOMPLETE; the report says what is missing")
    g.add_argument("--json", action="store_true", help="print the JSON verdict instead of the table")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("verify", help="run the verification protocol (aborts, recovery, logs, benchmark)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_target_args(p)
    _add_check_args(p, Settings())
    p.set_defaults(func=cmd_verify)


def settings_from_args(args: argparse.Namespace) -> Settings:
    fields = {f.name for f in dataclasses.fields(Settings)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    values["skip"] = tuple(args.skip)
    # absolute: a --defer-logs report is finished (and the baseline stored) from another directory
    values["baseline_file"] = Path(values.get("baseline_file") or Settings().baseline_file).absolute()
    return Settings(**values)


def settings_from_dict(data: dict[str, Any]) -> Settings:
    fields = {f.name for f in dataclasses.fields(Settings)}
    values = {k: v for k, v in data.items() if k in fields}
    values["skip"] = tuple(values.get("skip", ()))
    values["baseline_file"] = Path(values.get("baseline_file", "reports/baselines.json"))
    return Settings(**values)


def build_target(args: argparse.Namespace) -> targets.Target:
    if args.plan:
        if args.router or args.prefill or args.decode:
            raise VerifyUsageError("give either --plan FILE or --router/--prefill/--decode, not both")
        target = targets.from_document(read_plan_document(args.plan),
                                       source_from_args(args) if args.inventory else None)
        if args.profile:
            target.profile = args.profile
        return target
    if args.router:
        if args.inventory:
            raise VerifyUsageError("give either -i INVENTORY or --router/--prefill/--decode, not both")
        if not args.prefill or not args.decode:
            raise VerifyUsageError("explicit mode needs --router, at least one --prefill and one --decode URL")
        return targets.from_urls(args.router, args.prefill, args.decode, model=args.expect_model,
                                 sglang_version=args.expect_version, tp=args.expect_tp,
                                 profile=args.profile or "explicit")
    if args.prefill or args.decode:
        raise VerifyUsageError("--prefill/--decode need --router")
    target = targets.from_inventory(source_from_args(args))
    if args.profile:
        target.profile = args.profile
    return target


def build_log_source(args: argparse.Namespace, target: targets.Target) -> LogSource | None:
    if args.log_file and args.journal_dir:
        raise VerifyUsageError("give either --log-file or --journal-dir, not both")
    if args.log_file:
        files: dict[str, Path] = {}
        for item in args.log_file:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise VerifyUsageError(f"--log-file {item!r}: use WORKER=PATH (e.g. prefill=/tmp/prefill.log)")
            files[name] = Path(path)
        unknown = sorted(set(files) - {w.name for w in target.workers})
        if unknown:
            raise VerifyUsageError(f"--log-file for unknown worker(s) {', '.join(unknown)}; workers: "
                                   f"{', '.join(w.name for w in target.workers)}")
        return FileLogs(files)
    if args.journal_dir:
        return JournalDirLogs(args.journal_dir)
    if target.source is not None and all(w.host for w in target.workers):
        return SSHJournalLogs(target.source)
    return None


def _finish(report: Report, args: argparse.Namespace) -> int:
    page = report.write(args.report) if args.report else None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.table())
        if args.report:
            print(f"report: {args.report}")
    if page is not None:  # with --json on stderr, so that stdout stays one JSON document
        print(f"page: {page}", file=sys.stderr if args.json else sys.stdout)
    return report.exit_code


def _load_resume(path: Path) -> Report:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise VerifyUsageError(f"--resume {path}: {e}") from e
    if not isinstance(data, dict):
        raise VerifyUsageError(f"--resume {path}: holds a JSON {type(data).__name__}, not a pdfleet verify "
                               "report (give the --report file of a --defer-logs run)")
    try:
        return Report.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise VerifyUsageError(f"--resume {path}: not a complete pdfleet verify report ({type(e).__name__}: "
                               f"{e})") from e


def _write_journals(directory: Path) -> None:
    try:
        dumps = json.load(sys.stdin)
    except ValueError as e:
        raise VerifyUsageError(f"--journals-from-stdin: standard input is not the JSON of the journal read "
                               f"({e})") from e
    if not isinstance(dumps, dict) or not all(isinstance(u, dict) for u in dumps.values()):
        raise VerifyUsageError("--journals-from-stdin: expected {HOST: {UNIT: {since, before, error}}}")
    journaldump.write(str(directory), dumps)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.report is not None:
        problem = writable_problem(args.report)
        if problem:  # refuse now: a report that cannot be written would lose the whole run at its end
            raise VerifyUsageError(f"--report: {problem}")
    if args.resume:
        if not args.journal_dir:
            raise VerifyUsageError("--resume needs --journal-dir (the journal dumps to scan)")
        if not args.journals_from_stdin and not args.journal_dir.is_dir():
            raise VerifyUsageError(f"--journal-dir {args.journal_dir}: no such directory")
        report = _load_resume(args.resume)
        if args.journals_from_stdin:  # only once the report to finish is known good: nothing written in vain
            _write_journals(args.journal_dir)
        s = settings_from_dict(report.settings)
        if args.allow_dropped_frames:
            s.allow_dropped_frames = True
        if args.allow_incomplete:
            s.allow_incomplete = True
            report.settings["allow_incomplete"] = True
        return _finish(resume_with_journals(report, args.journal_dir, s), args)
    if args.journals_from_stdin:
        raise VerifyUsageError("--journals-from-stdin goes with --resume REPORT --journal-dir DIR")
    if args.defer_logs and (args.log_file or args.journal_dir):
        raise VerifyUsageError("--defer-logs reads no logs now; drop --log-file/--journal-dir")
    target = build_target(args)
    key = find_key(args.api_key_file, source_from_args(args) if args.inventory else None)
    if key:
        client.set_bearer(target.router_url, key)
    s = settings_from_args(args)
    logs = None if args.defer_logs else build_log_source(args, target)
    t0 = time.monotonic()
    report = asyncio.run(run_protocol(target, s, logs, defer_logs=args.defer_logs))
    report.timings.setdefault("wall_s", round(time.monotonic() - t0, 3))
    return _finish(report, args)
