"""The standing wedge watchdog: every interval, for each pair of the plan (a mono instance is a pair of one),
a real canary through that pair, forward progress from its workers' metrics and the thread-death/transfer-error
signatures in their journals; a state per pair (OK, DEGRADED, WEDGED, DEAD), Prometheus metrics, a state file
for ``pdfleet watchdog status``, and optional remediation through the ``pdfleet.fleet`` steps.

Modules, one job each: ``state`` (the per-pair state machine), ``progress`` (stall detection), ``journal``
(signature scan since the unit started), ``observe`` (one pair's signals), ``remediate`` (policy and steps),
``metrics`` (prometheus-client), ``statefile`` (what ``status`` reads), ``loop`` (the service), ``cli``.
"""
