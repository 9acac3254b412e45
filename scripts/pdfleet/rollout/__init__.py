"""Rolling a new SGLang version or patch onto a live fleet: what each host has (its sglang record), what the
inventory wants, in which order and batches, and the report. The steps on each pair come from pdfleet.fleet;
rollout.yml runs them through the pdfleet_* Ansible modules."""
