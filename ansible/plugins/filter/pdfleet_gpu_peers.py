"""Ansible filter `pdfleet_gpu_peer_problems`: the nixl role's GPU peer-to-peer check, judged by pdfleet.gpu_peers
(the one parser of `nvidia-smi topo -p2p`, which the conformance suite calls too).

    __nixl_gpu_peer_problems: >-
      {{ __nixl_probe_run.probe.gpu_peers | pdfleet_gpu_peer_problems(inventory_hostname, nixl_prefill_gpus,
         nixl_decode_gpus) }}

`pdfleet_gpu_peer_modes` gives the modes to ask for (r, w). Input of the check: {mode: {rc, stdout, stderr}} of
`nvidia-smi topo -p2p r` and `w` (the role's probe); output: the problems,
each naming the host, the GPU pairs and the fix (empty when every prefill/decode pair reads and writes OK).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleFilterError

try:
    from pdfleet.gpu_peers import MODES, peer_problems
except ImportError as exc:  # pragma: no cover - depends on how ansible-playbook was started
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def pdfleet_gpu_peer_problems(answers: Mapping[str, Mapping[str, object]] | None, host: str,
                              prefill_gpus: Iterable[object], decode_gpus: Iterable[object]) -> list[str]:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"the pdfleet package is not importable ({_IMPORT_ERROR}); run ansible-playbook from the "
            "project's virtualenv (make site, or .venv/bin/ansible-playbook)"
        )
    return peer_problems(str(host), answers or {}, [int(str(g)) for g in prefill_gpus],
                         [int(str(g)) for g in decode_gpus])


def pdfleet_gpu_peer_modes(_value: object = None) -> list[str]:
    """The `nvidia-smi topo -p2p` modes the check reads (what the role's probe asks the host for)."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(f"the pdfleet package is not importable ({_IMPORT_ERROR})")
    return list(MODES)


class FilterModule:
    def filters(self) -> dict:
        return {"pdfleet_gpu_peer_problems": pdfleet_gpu_peer_problems,
                "pdfleet_gpu_peer_modes": pdfleet_gpu_peer_modes}
