"""Day-2 operations on a running cluster from the inventory (``pdfleet ops``): status, logs, restart, drain,
undrain, canary. Hosts are reached only through ``pdfleet.remote`` (SSH with the inventory's settings), the
router and workers through ``pdfleet.fleet``. Every command works on all hosts in parallel, prints one line
per host (a failing host's line says why), and exits 0 all fine, 1 a check failed, 2 a host could not be
reached or the input was bad (the other hosts are still reported)."""
