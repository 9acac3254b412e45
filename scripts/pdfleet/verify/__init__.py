"""The verification protocol (issue 5): prove the PD service survives abort cascades, as code.

Modules: ``client`` (asyncio HTTP/1.1 + SSE client), ``targets`` (what to verify), ``checks`` (config gate,
deep liveness, recovery), ``cascade`` (abort cascades), ``signatures`` and ``logs`` (log sources and the logs
check), ``metrics`` (Prometheus parsing), ``bench`` (regression benchmark), ``report`` (verdict, table,
JSON), ``protocol`` (the order and the stop rules), ``cli`` (``pdfleet verify``).
"""
