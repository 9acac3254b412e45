"""Conformance: each host is what the plan says (GPUs, driver, CUDA, NIXL/UCX, SGLang + patch, units, model).

Run against any inventory: `pdfleet conformance -i INVENTORY` (the installed package's copy of this suite).
Every assertion message starts with the host's name and says what differs.
"""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.request

from testinfra.backend.base import CommandResult
from testinfra.host import Host

from pdfleet import conformance as c
from pdfleet import gpu_peers
from pdfleet.conformance import Expectations, Target
from pdfleet.prune.decide import active_unplanned
from pdfleet.prune.hoststate import SCAN_COMMAND, parse_scan
from pdfleet.prune.units import UNIT_DIR, UNIT_GLOB

from .conftest import hosts

SMI = f"nvidia-smi --query-gpu={c.SMI_QUERY} --format=csv,noheader,nounits"


def _run(node: Host, cmd: str) -> CommandResult:
    return node.run(cmd)


def _problems(problems: list[str]) -> str:
    return "\n".join(problems)


@hosts("gpu")
def test_gpus_match_the_model(target: Target, node: Host) -> None:
    out = _run(node, SMI)
    assert out.rc == 0, f"{target.name}: nvidia-smi failed (rc {out.rc}): {(out.stdout + out.stderr).strip()[:300]}"
    problems = c.gpu_problems(target.name, c.parse_smi(out.stdout), target.spec)
    assert not problems, _problems(problems)


@hosts("gpu")
def test_open_kernel_module(target: Target, node: Host) -> None:
    modinfo = target.setting("nvidia_driver_modinfo_command", "modinfo")
    out = _run(node, f"{shlex.quote(str(modinfo))} -F license nvidia")
    assert "MIT" in out.stdout, (f"{target.name}: the nvidia module's licence is {out.stdout.strip()!r}, expected "
                                 "'Dual MIT/GPL' (the open module; the proprietary one does not drive Blackwell)")


@hosts("gpu")
def test_driver_is_the_pin_and_held(target: Target, node: Host, expectations: Expectations) -> None:
    pin = str(expectations.plan.cuda["driver_version"])
    modinfo = target.setting("nvidia_driver_modinfo_command", "modinfo")
    gpus = c.parse_smi(_run(node, SMI).stdout)
    module = _run(node, f"{shlex.quote(str(modinfo))} -F version nvidia").stdout.strip()
    dpkg = _run(node, "dpkg-query -W -f '${db:Status-Want} ${db:Status-Status} ${Package} ${Version}\\n' "
                      "'nvidia-*' 'libnvidia-*' 'libcuda1' 2>/dev/null").stdout.splitlines()
    problems = c.driver_problems(target.name, gpus, module, pin) + c.hold_problems(target.name, dpkg, pin)
    assert not problems, _problems(problems)


@hosts("gpu")
def test_persistenced_runs(target: Target, node: Host) -> None:
    svc = node.service("nvidia-persistenced")
    assert svc.is_enabled and svc.is_running, (
        f"{target.name}: nvidia-persistenced is {'enabled' if svc.is_enabled else 'not enabled'} and "
        f"{'running' if svc.is_running else 'not running'}; expected enabled and running")


@hosts("gpu")
def test_cuda_toolkit_is_the_pin(target: Target, node: Host, expectations: Expectations) -> None:
    version = str(expectations.plan.cuda["version"])
    out = _run(node, f"/usr/local/cuda-{version}/bin/nvcc --version")
    found = c.nvcc_release(out.stdout)
    assert found == version, (f"{target.name}: /usr/local/cuda-{version}/bin/nvcc reports release {found} "
                              f"(rc {out.rc}), expected {version} (pdfleet_cluster.cuda.version)")


@hosts("workers")
def test_nixl_and_ucx(target: Target, node: Host, expectations: Expectations) -> None:
    venv = expectations.plan.sglang["venv"]
    want = str(expectations.plan.sglang["nixl_version"])
    out = _run(node, f"{venv}/bin/python -c 'import importlib.metadata as m, nixl; print(m.version(\"nixl\"))'")
    assert out.rc == 0 and out.stdout.strip() == want, (
        f"{target.name}: `import nixl` in {venv} gave {out.stdout.strip() or '(nothing)'} (rc {out.rc}), expected "
        f"nixl {want}: {out.stderr.strip()[-300:]}")
    ucx_info = target.setting("nixl_ucx_info", "/usr/bin/ucx_info")
    ucx = _run(node, f"{shlex.quote(str(ucx_info))} -d")
    tls, devices = c.required_transports(target.units)
    missing = sorted(tls - c.ucx_transports(ucx.stdout)) + sorted(devices - c.ucx_devices(ucx.stdout))
    assert ucx.rc == 0 and not missing, (f"{target.name}: {ucx_info} -d (rc {ucx.rc}) lacks {', '.join(missing)}; "
                                         f"offered: {', '.join(sorted(c.ucx_transports(ucx.stdout))) or 'none'}")


@hosts("workers")
def test_gpu_peer_access_between_prefill_and_decode(target: Target, node: Host) -> None:
    prefill, decode = c.pd_gpus(target.units)
    if not (prefill and decode):
        return  # no KV cache moves GPU to GPU on this host
    answers = {}
    for mode in gpu_peers.MODES:
        out = _run(node, gpu_peers.COMMAND.format(mode=mode))
        answers[mode] = {"rc": out.rc, "stdout": out.stdout, "stderr": out.stderr}
    problems = gpu_peers.peer_problems(target.name, answers, prefill, decode)
    assert not problems, _problems(problems)


@hosts("workers")
def test_sglang_version_and_patch(target: Target, node: Host, expectations: Expectations) -> None:
    s = expectations.plan.sglang
    venv = s["venv"]
    record_path = f"{venv}/pdfleet-record.json"
    raw = _run(node, f"cat {record_path}")
    assert raw.rc == 0, f"{target.name}: {record_path} is missing; the sglang role writes it"
    record = json.loads(raw.stdout)
    version = _run(node, f"{venv}/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'")
    assert version.stdout.strip() == s["version"], (
        f"{target.name}: SGLang {version.stdout.strip() or '(not importable)'} is installed, the pin is {s['version']}")
    expected = c.patched_sha256(str(s["version"]), bool(s["apply_patch"]))
    # The file the service's interpreter really imports (a stray copy earlier on its sys.path would win),
    # not the path the record names.
    origin = _run(node, f"CUDA_VISIBLE_DEVICES= {venv}/bin/python -c {shlex.quote(c.CONN_ORIGIN_SNIPPET)}")
    imported = origin.stdout.strip().splitlines()[-1] if origin.rc == 0 and origin.stdout.strip() else ""
    assert imported, (f"{target.name}: {venv}/bin/python cannot locate {c.CONN_MODULE} "
                      f"({origin.stderr.strip()[-200:]}); reinstall sglang with deploy.yml")
    found = _run(node, f"sha256sum {shlex.quote(imported)}").stdout.split()
    found_sha = found[0] if found else "(missing file)"
    state = "patched" if s["apply_patch"] else "pristine"
    assert imported == record["file"], (
        f"{target.name}: {venv}/bin/python imports {imported} (sha256 {found_sha}), but the record names "
        f"{record['file']}; remove the other copy or rerun deploy.yml")
    assert found_sha == expected == record["sha256"], (
        f"{target.name}: {imported} has sha256 {found_sha}; the {state} file of SGLang {s['version']} "
        f"({s['patch']}) has {expected}, the record says {record['sha256']}. Rerun deploy.yml (the sglang role "
        "refuses hand-edited files: reinstall sglang first).")


@hosts("units")
def test_units_enabled_and_active(target: Target, node: Host) -> None:
    bad = []
    for unit in target.units:
        svc = node.service(unit.name)
        if not (svc.is_enabled and svc.is_running):
            state = node.run(f"systemctl is-active {unit.name}").stdout.strip()
            bad.append(f"{unit.name} is {'enabled' if svc.is_enabled else 'not enabled'} and {state}")
    assert not bad, f"{target.name}: " + "; ".join(bad) + " (expected enabled and active)"


@hosts("all")
def test_no_unplanned_pdfleet_unit_runs(target: Target, node: Host) -> None:
    scan = _run(node, SCAN_COMMAND)
    assert scan.rc == 0, f"{target.name}: listing {UNIT_DIR}/{UNIT_GLOB} failed (rc {scan.rc})"
    installed = parse_scan(scan.stdout)
    active = [u.name for u in installed if u.active == "active"]
    problems = active_unplanned(target.name, active, installed, [u.name for u in target.units])
    assert not problems, _problems(problems)


@hosts("units")
def test_ports_listening(target: Target, node: Host) -> None:
    closed = []
    for unit in target.units:
        for key in ("port", "bootstrap_port"):
            port = unit.ports.get(key)
            if port is not None and not node.socket(f"tcp://{unit.address}:{port}").is_listening:
                closed.append(f"{unit.name} {key} {unit.address}:{port}")
    assert not closed, f"{target.name}: nothing listens on " + ", ".join(closed)


@hosts("units")
def test_router_ready(target: Target, expectations: Expectations) -> None:
    if not any(u.kind == "router" for u in target.units):
        return
    url = expectations.plan.router_url + "/readiness"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        status = f"unreachable ({exc})"
    assert status == 200, f"{target.name}: router {url} answers {status}, expected 200 (prefill and decode healthy)"


@hosts("units")
def test_gateway_in_its_own_venv(target: Target, node: Host, expectations: Expectations) -> None:
    """The router host runs the pinned router from its own venv, and the service venv holds no router (smg and
    sglang-router both install an `smg` script, and the router shares nothing with SGLang)."""
    if not any(u.kind == "router" for u in target.units):
        return
    s = expectations.plan.sglang
    package, pinned, venv = str(s["router_package"]), str(s["router_version"]), str(s["router_venv"])
    ask = ("import importlib.metadata as m,sys\nfor d in sys.argv[1:]:\n"
           " print(d, m.version(d)) if any(x.name == d for x in m.distributions()) else None")
    found = _run(node, f"{venv}/bin/python -c {shlex.quote(ask)} {package}").stdout.split()
    assert found[1:2] == [pinned], (
        f"{target.name}: {venv} has {package} {found[1] if len(found) > 1 else '(none)'}, the pin is {pinned}; "
        "rerun deploy.yml (the sglang role installs the router there)")
    routers = _run(node, f"{s['venv']}/bin/python -c {shlex.quote(ask)} smg sglang-router").stdout.strip()
    assert not routers, (f"{target.name}: the service venv {s['venv']} holds a router ({routers}); the router runs "
                         f"from {venv}: uninstall it there ({s['venv']}/bin/pip uninstall -y smg sglang-router)")


@hosts("workers")
def test_model_files_present(target: Target, node: Host, expectations: Expectations) -> None:
    path = expectations.plan.model["path"]
    manifest = _run(node, f"cat {path}/pdfleet-model-manifest.json 2>/dev/null")
    files = {"config.json": None, "tokenizer.json": None, "tokenizer_config.json": None}
    if manifest.rc == 0 and manifest.stdout.strip():  # a staged model's size manifest: every file, every size
        files = {f["path"]: f.get("size") for f in json.loads(manifest.stdout)["files"]}
    else:  # three small files prove nothing about the weights; only a simulated host serves a stand-in
        assert expectations.plan.sglang.get("launcher") == "sim", (
            f"{target.name}: {path}/pdfleet-model-manifest.json is missing: the weights were not staged by the "
            "model role (or were changed by hand); rerun site.yml to stage the model against its manifest")
    problems = []
    for name, size in files.items():
        f = node.file(f"{path}/{name}")
        if not f.exists:
            problems.append(f"model file {path}/{name} is missing")
        elif size is not None and f.size != size:
            problems.append(f"model file {path}/{name} has {f.size} bytes, expected {size}")
    assert not problems, f"{target.name}: " + "; ".join(problems)
