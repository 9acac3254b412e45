"""Small synchronous HTTP helpers for the fleet steps (router API, worker load): JSON in, JSON out.

Synchronous on purpose: the fleet steps run inside Ansible modules and short CLI commands, one call at a time.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class HTTPError(Exception):
    """No HTTP answer at all (refused, reset, timed out); the message names the URL."""


def call(method: str, url: str, body: Any = None, timeout_s: float = 5.0,
         api_key: str | None = None) -> tuple[int, Any]:
    """(status, parsed JSON body or text) for one request; raises HTTPError when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, _parse(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, _parse(e.read())
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise HTTPError(f"{method} {url}: {reason}") from None


def _parse(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
