"""vLLM's JSON config flags (``--eplb-config``, ``--additional-config``, ...) in ``extraArgs``,
read as vLLM's ``FlexibleArgumentParser`` reads them.

A config flag takes a JSON object, as ``--flag={...}`` or ``--flag`` then the object as the next
argument; a later one replaces the whole config. The dotted form ``--flag.key=value`` (its value
may also be the next argument) sets one key; vLLM merges the dotted keys of one flag spelling into
one JSON object that it appends after every other argument, so they win. ``_`` reads as ``-`` in
a long flag's name, up to its first '.'. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any


def normalised(arg: str) -> str:
    """vLLM reads ``_`` as ``-`` in a long flag's name, up to its first '.' (and '=')."""
    if not arg.startswith("--"):
        return arg
    name, sep, value = arg.partition("=")
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail + sep + value


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def final_config(extra_args: Sequence[str], is_flag: Callable[[str], bool]) -> Any:
    """The config vLLM runs with for the flag ``is_flag`` recognises (given a normalised name),
    or None when no argument sets it: the flag's values in argument order, then one merged object
    per dotted spelling in order of first appearance; the last one wins. A value that is not JSON
    is returned as the string vLLM would refuse."""
    args = [normalised(a) for a in extra_args]
    configs: list[Any] = []
    dotted: dict[str, dict[str, Any]] = {}
    skip: set[int] = set()
    for i, arg in enumerate(args):
        if i in skip:
            continue
        name, has_value, value = arg.partition("=")
        if arg.startswith("-") and "." in name:
            # The dotted form (vLLM: '-' and '.' in the name); its value may be the next argument.
            if not has_value:
                value = args[i + 1] if i + 1 < len(args) else ""
                skip.add(i + 1)
            head, *keys = name.split(".")
            node = dotted.setdefault(head, {})
            for key in keys[:-1]:
                child = node.get(key)
                node[key] = child = child if isinstance(child, dict) else {}
                node = child
            node[keys[-1]] = _json(value)
            continue
        if arg.startswith("--") and is_flag(name):
            if not has_value:
                value = args[i + 1] if i + 1 < len(args) else ""
                skip.add(i + 1)
            configs.append(_json(value))
    configs += [config for head, config in dotted.items() if is_flag(head)]
    return configs[-1] if configs else None
