"""UCX_TLS words at plan time: pdfleet_cluster.nixl.ucx_tls is checked against UCX's own transport and alias names
(constants.yml); a word UCX does not know is refused with the valid names, and the transports `ucx_info -d` must
list follow UCX's reading of the value ('^' deny list, ':aux')."""

from __future__ import annotations

import pytest
import yaml
from pdfleet import ucx
from pdfleet.errors import PlanError
from pdfleet.inventory_plan import supported_patches
from pdfleet.planner import build_plan
from pdfleet.versions import UCX_TLS_ALIASES, UCX_TLS_TRANSPORTS
from plan_support import EXAMPLES

BASE = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())["pdfleet_cluster"]
HOSTS = {"gpu01": "10.0.0.11"}


def _plan(ucx_tls: str):
    cluster = dict(BASE, nixl=dict(BASE.get("nixl") or {}, ucx_tls=ucx_tls))
    return build_plan(cluster, HOSTS, supported_patches())


@pytest.mark.parametrize("value", ["cuda_ipc,cuda_copy,sm,tcp", "all", "^tcp", "rc,ud:aux,cuda", "shm,self,cuda_ipc",
                                   "ib,gdr_copy", "dc_x,rocm"])
def test_ucx_words_plan(value: str) -> None:
    assert ucx.unknown_words(value) == []
    _plan(value)


@pytest.mark.parametrize("value, bad", [
    ("cuda_ipc,warpdrive", ["warpdrive"]),
    ("cuda-ipc,tcp", ["cuda-ipc"]),
    ("tcp,^cuda_ipc", ["^cuda_ipc"]),  # '^' only at the start of the list
    ("tcp,,sm", [""]),
    ("CUDA_IPC,shm", ["CUDA_IPC"]),
])
def test_unknown_words_are_refused_with_the_valid_names(value: str, bad: list[str]) -> None:
    assert ucx.unknown_words(value) == bad
    with pytest.raises(PlanError) as e:
        _plan(value)
    [problem] = [p for p in e.value.problems if p.variable == "pdfleet_cluster.nixl.ucx_tls"]
    assert f"{value!r}: {bad[0]!r} is not a UCX transport or alias" in str(problem)
    assert "transports cma, cuda_copy, cuda_ipc" in problem.fix and "aliases all, " in problem.fix
    assert "tcp" in problem.fix and "'^' first makes a deny list" in problem.fix


def test_two_typos_are_named_together() -> None:
    with pytest.raises(PlanError, match="'warpdrive', 'hyperlane' are not UCX transports or aliases"):
        _plan("warpdrive,cuda_ipc,hyperlane")


def test_all_stands_alone() -> None:
    with pytest.raises(PlanError, match="'all,cuda_ipc': UCX reads 'all' only on its own"):
        _plan("all,cuda_ipc")


def test_required_transports_follow_ucx_reading() -> None:
    prefill = next(u for u in _plan("rc,ud_verbs:aux,cuda_copy,tcp").hosts["gpu01"] if u.role == "prefill")
    assert prefill.required_transports == ["cuda_copy", "tcp", "cuda_ipc"]  # aliases, aux words left out
    prefill = next(u for u in _plan("^tcp,ud").hosts["gpu01"] if u.role == "prefill")
    assert prefill.required_transports == ["cuda_ipc"]  # a deny list names nothing that must exist


def test_the_names_are_ucx_names() -> None:
    # The ones the bundle and SGLang's notes rely on, and UCX's main aliases (its FAQ's table).
    assert {"cuda_ipc", "cuda_copy", "gdr_copy", "tcp", "self", "posix", "sysv", "cma", "knem", "xpmem",
            "rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5", "dc_mlx5"} <= UCX_TLS_TRANSPORTS
    aliases = {"all", "sm", "shm", "cuda", "rocm", "rc", "ud", "dc", "rc_x", "rc_v", "ud_x", "ud_v", "ugni"}
    assert aliases <= UCX_TLS_ALIASES
    assert not UCX_TLS_TRANSPORTS & UCX_TLS_ALIASES
