"""A stray inventory value never becomes a directive, a path outside its place or a privilege (issue 30 item 3):
the planner refuses each, naming the field; `render -o` writes nothing outside its directory; a model that
expands without bound is refused before it is walked; and a fuzzer finds no traceback and no control character
in any rendered line."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pdfleet.cli import main
from pdfleet.clusterspec import MAX_VALUES, parse_cluster
from pdfleet.errors import PlanError
from pdfleet.inventory_plan import plan_inventory, supported_patches
from pdfleet.planner import build_plan
from pdfleet.render import RenderPathError, render_plan, render_unit
from plan_support import EXAMPLES, write_inventory

BASE = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = {"gpu01": "127.0.0.1"}
INJECTION = "--x\nExecStartPre=+/bin/true"


def _with(path: str, value: object, base: dict | None = None) -> dict:
    """The example model (or `base`) with the value at a dotted path (list items by index) replaced."""
    cluster = copy.deepcopy(BASE if base is None else base)
    *parents, last = path.split(".")
    node: object = cluster
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})  # type: ignore[index]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value  # type: ignore[index]
    return cluster


def _problems(cluster: dict, hosts: dict[str, str] = HOSTS) -> str:
    with pytest.raises(PlanError) as err:
        build_plan(cluster, hosts, supported_patches(), source="test")
    return str(err.value)


CASES = [
    # (dotted path, value, the field named, a substring of the reason)
    ("instances.0.extra_args", [INJECTION], "instances[0].extra_args[0]", "control character '\\n'"),
    ("model.server_args", ["--a\rb"], "model.server_args[0]", "control character '\\r'"),
    ("service.user", "root", "service.user", "system account"),
    ("service.user", "pd\nExecStartPre=+/bin/sh", "service.user", "control character"),
    ("service.group", "x y", "service.group", "not a valid group name"),
    ("service.state_dir", "/", "service.state_dir", "system directory"),
    ("service.config_dir", "/etc", "service.config_dir", "system directory"),
    ("service.config_dir", "/var/lib", "service.config_dir", "system directory"),
    ("model.path", "/", "model.path", "system directory"),
    ("model.path", "/srv/models/../../etc", "model.path", "not a normalised path"),
    ("model.path", "models/x", "model.path", "is a relative path"),
    ("service.state_dir", "pdfleet", "service.state_dir", "is a relative path"),
    ("sglang.venv", "/home/alice", "sglang.venv", "home directory"),
    ("nixl.extra_env", {"LD_PRELOAD": "/tmp/evil.so"}, "nixl.extra_env.LD_PRELOAD", "dynamic loader"),
    ("nixl.extra_env", {"A B": "1"}, "nixl.extra_env.A B", "not an environment variable name"),
    ("nixl.extra_env", {"UCX_LOG": "x\ny"}, "nixl.extra_env.UCX_LOG", "control character"),
    ("nixl.ucx_tls", "tcp\nExecStart=/bin/sh", "nixl.ucx_tls", "control character"),
    ("nixl.extra_env", {"UCX_LOG_FILE": "/tmp/x\\"}, "nixl.extra_env.UCX_LOG_FILE", "quote or backslash"),
    ("nixl.ucx_net_devices", 'mlx5_0:1"', "nixl.ucx_net_devices", "quote or backslash"),
    ("router.metrics_port", -1, "router.metrics_port", "outside 1-65535"),
    ("router.metrics_port", 0, "router.metrics_port", "outside 1-65535"),
    ("router.metrics_port", 2**63, "router.metrics_port", "out of range"),
    ("router.metrics_port", 30000, "instances[0] (prefill0).port", "already taken by router.metrics_port"),
    ("instances.0.port", 9090, "instances[0] (prefill0).port", "already taken by the monitoring role's Prometheus"),
    ("instances.1.port", 9470, "instances[1] (decode0).port", "already taken by the watchdog's metrics"),
    ("service.restart_sec", 0, "service.restart_sec", "outside 1-3600"),
    ("service.start_timeout_s", -1, "service.start_timeout_s", "outside 1-86400"),
    ("service.limit_nofile", 0, "service.limit_nofile", "outside 1024-1048576"),
    ("router.health_check_interval_secs", 0, "router.health_check_interval_secs", "outside 1-3600"),
    ("router.drain_timeout_s", -1, "router.drain_timeout_s", "outside 0-86400"),
    ("router.port", 10**400, "router.port", "out of range"),
    ("instances.0.mem_fraction_static", float("inf"), "instances[0].mem_fraction_static", "not a usable number"),
    ("instances.0.mem_fraction_static", float("nan"), "instances[0].mem_fraction_static", "not a usable number"),
    ("nixl.heartbeat_interval_s", 1e400, "nixl.heartbeat_interval_s", "not a usable number"),
    ("instances.0.name", "../../p", "instances[0].name", "not a plain name"),
]


@pytest.mark.parametrize(("path", "value", "field", "reason"), CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CASES])
def test_a_dangerous_or_broken_value_is_refused_naming_the_field(path: str, value: object, field: str,
                                                                  reason: str) -> None:
    message = _problems(_with(path, value))
    line = next((ln for ln in message.splitlines() if f"pdfleet_cluster.{field}" in ln), message)
    assert reason in line, message
    assert "Traceback" not in message and len(message) < 2000


def test_the_example_itself_is_accepted() -> None:
    build_plan(copy.deepcopy(BASE), HOSTS, supported_patches(), source="test")


@pytest.mark.parametrize(("name", "address", "reason"), [
    ("../../x", "127.0.0.1", "not a plain host name"),
    ("/etc", "127.0.0.1", "not a plain host name"),
    ("gpu01", "127.0.0.1\nExecStartPre=+/bin/true", "not an address or DNS name"),
    ("gpu01", "10.0.0.1 --host 0.0.0.0", "not an address or DNS name"),
])
def test_inventory_host_names_and_addresses_are_checked(name: str, address: str, reason: str) -> None:
    cluster = copy.deepcopy(BASE)
    if name != "gpu01":
        cluster = yaml.safe_load(yaml.safe_dump(cluster).replace("gpu01", name))
    message = _problems(cluster, {name: address})
    assert reason in message


def test_render_never_writes_outside_its_directory(tmp_path: Path) -> None:
    """The planner refuses the name; the writer refuses it again if a plan ever carries one."""
    plan = build_plan(copy.deepcopy(BASE), HOSTS, supported_patches(), source="test")
    out = tmp_path / "out"
    evil = type(plan)(**{**plan.__dict__, "hosts": {"../../escaped": plan.hosts["gpu01"]}})
    with pytest.raises(RenderPathError, match="outside"):
        render_plan(evil, out)
    assert not (tmp_path.parent / "escaped").exists() and not list(tmp_path.rglob("*.service"))
    render_plan(plan, out)
    assert {p.parent for p in out.rglob("*.service")} == {out / "gpu01"}


def _bomb(depth: int = 8) -> list:
    layer: list = ["lol"] * 9
    for _ in range(depth):
        layer = [layer] * 9
    return layer


def test_a_model_that_expands_without_bound_is_refused_before_it_is_walked() -> None:
    cluster = _with("router.extra_args", _bomb())  # 9**9 values, shared references
    with pytest.raises(PlanError) as err:
        parse_cluster(cluster)
    assert f"holds more than {MAX_VALUES} values" in str(err.value) and len(str(err.value)) < 500


def test_an_alias_bomb_in_the_inventory_is_refused_with_a_short_message(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path / "inv", copy.deepcopy(BASE))
    cluster_file = inv / "group_vars" / "all" / "cluster.yml"
    anchors = ['  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    anchors += [f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    text = cluster_file.read_text().replace("pdfleet_cluster:\n", "pdfleet_bomb:\n" + "\n".join(anchors)
                                            + "\npdfleet_cluster:\n", 1)
    cluster_file.write_text(text.replace("  router:\n", "  router:\n    extra_args: *a8\n", 1))
    assert len(cluster_file.read_bytes()) < 2000
    assert main(["plan", "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert "holds more than" in err and len(err) < 500


# The fuzzer: any field of the example replaced by an arbitrary scalar or short list.
_LEAVES: list[str] = []


def _collect(node: object, prefix: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _collect(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list) and node and isinstance(node[0], dict):
        for i, v in enumerate(node):
            _collect(v, f"{prefix}.{i}")
    else:
        _LEAVES.append(prefix)


_collect(BASE, "")
# Fields the example leaves out, with a value of their type.
_LEAVES += ["service.user", "service.state_dir", "nixl.extra_env", "nixl.ucx_net_devices", "router.extra_args",
            "model.served_name", "router.metrics_port"]
ODD = st.sampled_from([INJECTION, "a\rb", "x\x00y", "../../x", "/", "root", "a b", "$x", "%h", '"q"', "\\", "'"])
TEXT = st.one_of(ODD, st.text(max_size=30), st.text(st.characters(codec="utf-8"), max_size=12))
NUMBER = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True))
ANY = st.one_of(TEXT, NUMBER, st.booleans(), st.none(), st.lists(TEXT, max_size=3))


def _original(path: str) -> object:
    node: object = BASE
    for key in path.split("."):
        if isinstance(node, list):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return None
    return node


@st.composite
def _edit(draw: st.DrawFn) -> tuple[str, object]:
    """A field and a value: mostly of the field's own type (so the plan often succeeds and renders), else any."""
    path = draw(st.sampled_from(_LEAVES))
    was = _original(path)
    if path == "nixl.extra_env":
        typed = st.dictionaries(st.sampled_from(["UCX_LOG_LEVEL", "NCCL_DEBUG", "A B", "LD_PRELOAD"]), TEXT,
                                max_size=2)
    elif isinstance(was, list):
        typed = st.lists(TEXT, max_size=4)
    elif isinstance(was, bool):
        typed = st.booleans()
    elif isinstance(was, int | float):
        typed = NUMBER
    else:
        typed = TEXT
    return path, draw(st.one_of(typed, typed, typed, ANY))


# What a rendered file may hold besides printable characters: its line ends.
FORBIDDEN = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _keys(text: str) -> set[str]:
    """Each line's directive (a unit file's Key= or [Section], an env file's NAME=), comments and blanks aside."""
    return {line.split("=", 1)[0] for line in text.splitlines() if line.strip() and not line.startswith("#")}


def _example_keys() -> set[str]:
    """Every directive the example profiles' renders hold: a fuzzed model may change values, never add one."""
    keys: set[str] = set()
    for profile in sorted(p.name for p in EXAMPLES.iterdir() if (p / "group_vars").is_dir()):
        plan = plan_inventory(EXAMPLES / profile)
        for unit in plan.units():
            for text in render_unit(unit, plan).values():
                keys |= _keys(text)
    return keys


EXAMPLE_KEYS = _example_keys()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(_edit(), min_size=1, max_size=2))
def test_fuzzed_models_plan_or_are_refused_and_render_clean(edits: list, tmp_path_factory: pytest.TempPathFactory
                                                            ) -> None:
    cluster = copy.deepcopy(BASE)
    for path, value in edits:
        cluster = _with(path, value, cluster)
    try:
        plan = build_plan(cluster, HOSTS, supported_patches(), source="fuzz")
    except PlanError as exc:
        assert "Traceback" not in str(exc)
        return
    out = tmp_path_factory.mktemp("render")
    written = render_plan(plan, out)
    for path in written:
        assert out in path.resolve().parents
        text = path.read_text(encoding="utf-8")
        for line in text.splitlines():
            assert not FORBIDDEN.search(line), (path, line)
        # the example's keys, and the variables the model itself adds (nixl.extra_env: any valid name)
        extra_env = cluster.get("nixl", {}).get("extra_env")
        allowed = EXAMPLE_KEYS | set(extra_env if isinstance(extra_env, dict) else {})
        assert _keys(text) <= allowed, (path, _keys(text) - allowed)
    for unit in plan.units():
        files = render_unit(unit, plan)
        # Every value stays inside its line: ExecStart= splits back into exactly the planned arguments and the
        # env file holds exactly the planned variables (a newline would end one early and start a directive).
        (exec_line,) = [ln for ln in files[f"{unit.name}.service"].splitlines() if ln.startswith("ExecStart=")]
        assert len(shlex.split(exec_line.removeprefix("ExecStart="))) == len(unit.exec_start), exec_line
        env_lines = [ln for ln in files[f"{unit.name}.env"].splitlines() if ln and not ln.startswith("#")]
        assert [ln.split("=", 1)[0] for ln in env_lines] == sorted(unit.environment), env_lines

