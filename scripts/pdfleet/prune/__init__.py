"""What a converge removes: the pdfleet units a host has that the plan no longer names for it.

Every unit pdfleet renders carries ``X-Pdfleet-Kind/Role/Url`` lines in its ``[Unit]`` section
(templates/*.service.j2; systemd ignores ``X-`` keys). A ``pdfleet-*.service`` in /etc/systemd/system with
those lines whose name the plan does not give that host is *stale*: the units role drains it (a worker),
stops, disables and deletes it and its own environment file before the planned units start. One named
``pdfleet-*`` without them was not made by pdfleet: it is *foreign*, never touched, and reported.

A unit another role installs beside a planned unit (the watchdog beside the router: ansible/playbooks/
watchdog.yml) says so with ``X-Pdfleet-Beside=<unit>``: it is planned wherever that unit is planned, and
stale, like the rest, on a host where it is not (the router moved).

One job per module:

- :mod:`pdfleet.prune.units`: what an installed unit file says (pdfleet's marker, role, URL, own env file);
- :mod:`pdfleet.prune.decide`: which of a host's units are stale or foreign, given the plan (pure);
- :mod:`pdfleet.prune.hoststate`: reading a host's installed units, over SSH or from the units role's slurp;
- :mod:`pdfleet.prune.drain`: taking stale workers out of the router and waiting until they are idle;
- :mod:`pdfleet.prune.cli`: ``python -m pdfleet.prune drain``, the units role's drain step.

The same parser and decision serve the three readers: the units role (the ``pdfleet_units_prune`` filter over
the files it slurped), ``pdfleet plan --removals`` (over SSH) and conformance.
"""
