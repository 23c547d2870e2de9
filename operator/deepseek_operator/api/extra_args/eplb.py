"""EPLB redundant experts set through ``spec.engine.extraArgs``: read as vLLM's parser reads them.

vLLM keeps ``num_redundant_experts`` in ``--eplb-config`` (``EPLBConfig``). It changes the global
expert count (routed + redundant) that vLLM divides over the expert-parallel group, and vLLM
refuses it without ``--enable-eplb``; so the decision must know it. There is no typed field for it
(the API is a contract): it is read out of ``extraArgs`` here, in the spellings below, the same
way vLLM's ``FlexibleArgumentParser`` and ``EPLBConfig`` read them:

* ``--eplb-config={"num_redundant_experts": 8, ...}`` or ``--eplb-config`` then the JSON object as
  the next argument; a later ``--eplb-config`` (in any spelling) replaces the whole config;
* ``--eplb-config.num_redundant_experts=8`` (the dotted form); vLLM merges the dotted keys of one
  flag spelling into one JSON object that it appends after every other argument, so they win.

Only these spellings may carry the key (admission rule ``ExtraArgsRedundantExpertsSpelling``, CEL
and offline alike): the value a plain decimal JSON integer, the JSON object flat (no nested
object) and naming the key once. vLLM also takes ``"8"``, ``8.0``, ``true``, ``1k``, the dotted
form's value as the next argument, abbreviations and ``_`` for ``-``; none of those is needed to
say a number, so they are refused rather than modelled. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from deepseek_operator.api.extra_args.config_flags import final_config

EPLB_CONFIG_FLAG = "--eplb-config"
REDUNDANT_EXPERTS_KEY = "num_redundant_experts"
# The one word every spelling of the key contains (a JSON key cannot hide it: '\\u' escapes are
# refused by ExtraArgsDoNotOverrideTypedFields).
REDUNDANT_MARK = "redundant"
MAX_REDUNDANT_EXPERTS = 9999  # four digits: the _NUMBER pattern
_NUMBER = r"(0|[1-9][0-9]{0,3})"
# RE2 (CEL's matches()) and Python's re read these alike: no lookaround, no backreferences.
DOTTED_FORM = rf"^--eplb-config\.num_redundant_experts={_NUMBER}$"
JSON_FORM = rf'^(--eplb-config=)?\{{[^{{}}]*"num_redundant_experts" *: *{_NUMBER} *(,[^{{}}]*)?\}}$'
# The shortest abbreviation argparse expands to --eplb-config (no other vLLM option starts with
# "--ep" in any supported release; tests/unit/test_eplb.py checks that against the catalog).
_SHORTEST_ABBREVIATION = "--ep"


def canonical_redundant_experts_arg(arg: str) -> bool:
    """Whether ``arg`` may mention redundant experts: not at all, or in a canonical spelling
    naming the key exactly once."""
    if REDUNDANT_MARK not in arg:
        return True
    once = arg.find(REDUNDANT_MARK) == arg.rfind(REDUNDANT_MARK)
    # fullmatch without the anchors: Python's '$' would also match before a final newline.
    return once and any(re.fullmatch(p[1:-1], arg) for p in (DOTTED_FORM, JSON_FORM))


def _is_eplb_config(name: str) -> bool:
    """Whether the flag name (``_`` already read as ``-``) is --eplb-config or an abbreviation."""
    return len(name) >= len(_SHORTEST_ABBREVIATION) and EPLB_CONFIG_FLAG.startswith(name)


def redundant_experts(extra_args: Sequence[str]) -> int:
    """The ``num_redundant_experts`` vLLM runs with, given these extra arguments (0 unless set).

    Mirrors ``FlexibleArgumentParser.parse_args``: ``--eplb-config`` values in argument order,
    then one merged object per dotted flag spelling, in order of first appearance; the last one
    is the config. A value vLLM cannot parse leaves vLLM refusing the command line at start, so
    it counts as 0 here.
    """
    config = final_config(extra_args, _is_eplb_config)
    if not isinstance(config, dict):
        return 0
    count = config.get(REDUNDANT_EXPERTS_KEY, 0)
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
