"""The launch check: every rendered launch line parsed and resolved by the pinned SGLang itself.

* :mod:`.check` (control side) plans inventories at each pinned version, batches their units into one
  runtime process per version and turns the answers into problems and settings;
* :mod:`.probe` and :mod:`.sm120` run inside the SGLang CPU runtime (:mod:`pdfleet.patch.runtime`);
* :mod:`.store` keeps the committed effective settings (``resolved.json``) that ``pdfleet plan`` shows.
"""
