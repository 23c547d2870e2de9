"""``spec.engine.extraArgs`` read as vLLM's ``serve`` parser reads them.

* :mod:`.parser` - items against every supported release's option table (abbreviations, ``_``
  for ``-``, values that follow an option), with the CEL that says the same in the CRD;
* :mod:`.owned_flags` - the flags and model config keys the operator owns, in every spelling;
* :mod:`.config_flags` - vLLM's JSON config flags (``--eplb-config``, ...) and their dotted keys;
* :mod:`.eplb` - EPLB redundant experts, which the decision must know.

The rules that refuse items are :mod:`deepseek_operator.api.rules.extra_args`; this package only
reads, and never imports the rules (import contract ``extra-args``, pyproject.toml).
"""
