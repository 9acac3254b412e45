"""UCX_TLS as UCX reads it: the words of pdfleet_cluster.nixl.ucx_tls checked against UCX's own transport and alias
names (constants.yml, which says where in UCX they come from), and the transports `ucx_info -d` must then list.

UCX splits the value at commas (src/ucs/config/parser.c, the allow-list parser). A leading '^' turns the whole list
into a deny list ("^tcp,cuda_ipc": everything but these); a word may end in ':aux' (use the transport only as an
auxiliary, e.g. UD for RC's bootstrap). A word UCX does not know is no error to UCX: it logs a warning
("transport 'x' is not available", src/ucp/core/ucp_context.c) in each worker's log and runs with the
rest, and the KV transfers may silently take another transport (TCP), so the planner refuses it.
'all' must stand alone: with other words UCX refuses the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdfleet.versions import UCX_TLS_ALIASES, UCX_TLS_TRANSPORTS

AUX_SUFFIX = ":aux"
DENY_PREFIX = "^"
ALL = "all"  # UCS_CONFIG_PARSER_ALL: every transport; only alone


@dataclass(frozen=True)
class TlsList:
    """One UCX_TLS value: deny list or allow list, and its words (without '^'; ':aux' kept)."""

    deny: bool
    words: tuple[str, ...]


def parse_tls(value: str) -> TlsList:
    text = value.strip()
    deny = text.startswith(DENY_PREFIX)
    if deny:
        text = text[len(DENY_PREFIX):]
    return TlsList(deny, tuple(w.strip() for w in text.split(",")) if text else ())


def _name(word: str) -> str:
    return word[: -len(AUX_SUFFIX)] if word.endswith(AUX_SUFFIX) else word


def unknown_words(value: str) -> list[str]:
    """The words of a UCX_TLS value that UCX does not know (an empty word shows as ''), in order, each once."""
    out: list[str] = []
    for word in parse_tls(value).words:
        name = _name(word)
        if name not in UCX_TLS_TRANSPORTS and name not in UCX_TLS_ALIASES and word not in out:
            out.append(word)
    return out


def misplaced_words(value: str) -> list[str]:
    """Words UCX's list parser refuses where they stand: 'all' with other words (UCX fails to read the value)."""
    words = parse_tls(value).words
    return [w for w in words if w == ALL] if len(words) > 1 else []


def valid_names() -> str:
    """UCX's words for a message: the transports, then the aliases."""
    return (f"transports {', '.join(sorted(UCX_TLS_TRANSPORTS))}; aliases {', '.join(sorted(UCX_TLS_ALIASES))}; "
            f"'{DENY_PREFIX}' first makes a deny list, '{AUX_SUFFIX}' after a word an auxiliary one, '{ALL}' stands "
            "alone")


def concrete_transports(value: str) -> list[str]:
    """The single transports an allow list names (aliases and ':aux' words left out; none for a deny list):
    each must be listed by `ucx_info -d` on the host."""
    tls = parse_tls(value)
    if tls.deny:
        return []
    out: list[str] = []
    for word in tls.words:
        if word and not word.endswith(AUX_SUFFIX) and word in UCX_TLS_TRANSPORTS and word not in out:
            out.append(word)
    return out
