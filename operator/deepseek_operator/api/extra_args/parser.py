"""extraArgs read the way vLLM's ``serve`` parser reads them, against every supported release's table.

vLLM's ``FlexibleArgumentParser`` turns ``_`` into ``-`` in a long option's name (up to the first
``.``), splits ``--x.key=v`` / ``--x.key v`` into the JSON value of ``--x``, expands ``-O3``, and
hands the rest to argparse, which takes ``--name=value``, ``-xVALUE`` for a two-character option
that takes a value, and reads ``-1`` as a value. An item that starts with ``-`` is an option (a value with a leading ``-`` is refused, as in the typed
fields); any other item is a value and must follow an option that leaves one open. The option
table (catalog/vllm/<release>.json) is the union of every supported release: admission refuses
only what no supported release accepts. Abbreviations are refused: one release's unambiguous
abbreviation can be the next release's ambiguous one.

Each rule is a CEL expression (in the CRD) and a Python function (offline) that read the same
tables, so ``render`` and the API server refuse the same items with the same words.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from deepseek_operator.catalog.vllm import ServeOption, supported_releases, vllm_release

# Most items extraArgs holds (its maxItems): the CEL of the value rule walks these indices.
MAX_EXTRA_ARGS = 64
# argparse reads an item matching this as a value (the parser has no negative-number options).
NEGATIVE_NUMBER = r"^-[0-9]+$|^-[0-9]*\.[0-9]+$"
# C0 controls and DEL: no spelling of an option holds one (a newline ends up in a flag name).
CONTROL = r"[\x00-\x1f\x7f]"


def _union() -> dict[str, ServeOption]:
    """Every option string of any supported release; of its spellings the most values it takes."""
    rank = {"none": 0, "one": 1, "optional": 1, "many": 2}
    options: dict[str, ServeOption] = {}
    for release in supported_releases():
        for name, option in vllm_release(release).serve_options.items():
            known = options.get(name)
            if known is None or rank[option.values] > rank[known.values]:
                options[name] = option
    return options


OPTIONS = _union()
LONG = tuple(sorted(o for o in OPTIONS if o.startswith("--")))
SHORT = tuple(sorted(o for o in OPTIONS if not o.startswith("--")))
LONG_VALUED = tuple(o for o in LONG if OPTIONS[o].takes_value)
SHORT_VALUED = tuple(o for o in SHORT if OPTIONS[o].takes_value)
MANY = tuple(sorted(o for o in OPTIONS if OPTIONS[o].values == "many"))
# Two-character options that take a value: argparse reads -n4 as -n 4.
ATTACHED = tuple(o for o in SHORT_VALUED if len(o) == 2)


def _set(values: tuple[str, ...]) -> str:
    return "{" + ", ".join(f"'{v}': true" for v in values) + "}"


# --- Python: how the parser reads one item ---------------------------------------------------


def is_value(item: str) -> bool:
    """Whether vLLM's parser reads ``item`` as a value rather than an option."""
    return not item.startswith("-") or item == "-" or re.match(NEGATIVE_NUMBER, item) is not None


def _head(item: str) -> str:
    """The option name vLLM's parser looks up for ``item`` (before ``=`` and the first ``.``)."""
    head = item.split("=")[0].split(".")[0]
    return head.replace("_", "-") if item.startswith("--") else head


def _needs_value(item: str) -> bool:
    # An attached =value, or a dotted JSON key (whose value is attached or the next item).
    return "=" in item or "." in item.split("=")[0]


def resolve(item: str, table: dict[str, ServeOption]) -> str | None:
    """The option of ``table`` that the parser reads option item ``item`` as, or None."""
    head = _head(item)
    long = item.startswith("--")
    if not long and item.startswith("-O"):
        return "-O"  # vLLM's own -O3 / -O=3 / -O 3 (--optimization-level)
    if head in table:
        return head
    if (
        not long
        and len(head) > 2
        and not _needs_value(item)
        and head[:2] in table
        and table[head[:2]].takes_value
    ):
        return head[:2]  # -n4 is -n 4
    return None  # an abbreviation too: the next release may add an option that makes it ambiguous


def _takes_value(option: str, table: dict[str, ServeOption]) -> bool:
    return option == "-O" or table[option].takes_value


def option_ok(item: str) -> bool:
    """An item read as an option is a spelling some supported release accepts."""
    if is_value(item):
        return True
    if re.search(CONTROL, item):
        return False
    option = resolve(item, OPTIONS)
    if option is None:
        return False
    return not _needs_value(item) or _takes_value(option, OPTIONS)


def _opens(item: str, many: bool = False) -> bool:
    """Whether ``item`` is an option whose value is the next item (with ``many``: several)."""
    if is_value(item) or "=" in item:
        return False
    if "." in item or item == "-O":
        return not many
    option = resolve(item, OPTIONS)
    if option is None or option == "-O" or (len(_head(item)) > 2 and option == _head(item)[:2]):
        return False  # unknown, -O3, or -n4: the value is attached
    return option in MANY if many else OPTIONS[option].takes_value


def value_ok(items: list[str], i: int) -> bool:
    """Item ``i``, if a value, follows an option that leaves it open (a run: a many-valued one)."""
    item = items[i]
    if not is_value(item):
        return True
    if i == 0:
        return False
    before = items[i - 1]
    if _opens(before):
        return True
    return (
        is_value(before) and i > 1 and (_opens(items[i - 2], many=True) or is_value(items[i - 2]))
    )


def first_bad_value(items: list[str]) -> int | None:
    """Index of the first value no option leaves open, or None."""
    return next((i for i in range(len(items)) if not value_ok(items, i)), None)


def not_in_release(items: list[str] | tuple[str, ...], release: str) -> list[str]:
    """The option items that ``release``'s own parser reads as none of its options."""
    table = dict(vllm_release(release).serve_options)
    return [
        item
        for item in items
        if not is_value(item)
        and not (
            (option := resolve(item, table)) is not None
            and (not _needs_value(item) or _takes_value(option, table))
        )
    ]


def nearest(item: str, release: str) -> str | None:
    """What to suggest from ``release``'s table: its spellings of the setting ``item``'s option
    sets in another release (``--disable-lora`` → ``--enable-lora or --no-enable-lora``), else
    the closest option name (difflib's ratio)."""
    table = vllm_release(release).serve_options
    known = OPTIONS.get(_head(item))
    same = sorted(n for n, o in table.items() if known is not None and o.dest == known.dest)
    if same:
        return " or ".join(same) + f" (they set {known.dest})" if known else None
    close = difflib.get_close_matches(_head(item).lower(), list(table), n=1, cutoff=0.6)
    return close[0] if close else None


# --- CEL: the same reading on the API server ------------------------------------------------

_IS_VALUE = "(!{a}.startsWith('-') || {a} == '-' || {a}.matches(r'" + NEGATIVE_NUMBER + "'))"
_HEAD_LONG = "{a}.split('=')[0].split('.')[0].replace('_', '-')"
_HEAD_SHORT = "{a}.split('=')[0].split('.')[0]"
_NEEDS_VALUE = "({a}.contains('=') || {a}.split('=')[0].contains('.'))"


def _cel_long_ok(a: str) -> str:
    head = _HEAD_LONG.format(a=a)
    needs = _NEEDS_VALUE.format(a=a)
    return f"({head} in {_set(LONG)} && (!{needs} || {head} in {_set(LONG_VALUED)}))"


def _cel_short_ok(a: str) -> str:
    head = _HEAD_SHORT.format(a=a)
    needs = _NEEDS_VALUE.format(a=a)
    return (
        f"({a}.startsWith('-O') || "
        f"({head} in {_set(SHORT)} && (!{needs} || {head} in {_set(SHORT_VALUED)})) || "
        f"(!{needs} && size({head}) > 2 && {head}.substring(0, 2) in {_set(ATTACHED)}))"
    )


# Runs on one item (``self``, a string).
OPTION_CEL = (
    f"{_IS_VALUE.format(a='self')} || (!self.matches(r'{CONTROL}') && "
    f"(self.startsWith('--') ? {_cel_long_ok('self')} : {_cel_short_ok('self')}))"
)


def _cel_opens(a: str, many: bool) -> str:
    """CEL: ``a`` (an option item) leaves its value to the next item (``many``: several)."""
    head_long = _HEAD_LONG.format(a=a)
    head_short = _HEAD_SHORT.format(a=a)
    if many:
        wanted_long = wanted_short = MANY
        extra, dotted = "false", "false"
    else:
        wanted_long, wanted_short = LONG_VALUED, SHORT_VALUED
        extra, dotted = f"{a} == '-O'", f"{a}.contains('.')"
    long_ok = f"{head_long} in {_set(wanted_long)}"
    short_ok = f"({extra} || {head_short} in {_set(wanted_short)})"
    return (
        f"(!{_IS_VALUE.format(a=a)} && !{a}.contains('=') && ({dotted} || "
        f"({a}.startsWith('--') ? {long_ok} : {short_ok})))"
    )


def _cel_value_ok(list_expr: str) -> str:
    item = f"{list_expr}[i]"
    before = f"{list_expr}[i - 1]"
    twice = f"{list_expr}[i - 2]"
    return (
        f"(!{_IS_VALUE.format(a=item)} || (i > 0 && ({_cel_opens(before, False)} || "
        f"({_IS_VALUE.format(a=before)} && i > 1 && ({_cel_opens(twice, True)} || "
        f"{_IS_VALUE.format(a=twice)})))))"
    )


_INDICES = "[" + ", ".join(str(i) for i in range(MAX_EXTRA_ARGS)) + "]"
# Runs on spec.engine.
VALUES_CEL = (
    f"!has(self.extraArgs) || {_INDICES}.all(i, i >= size(self.extraArgs) || "
    f"{_cel_value_ok('self.extraArgs')})"
)


@dataclass(frozen=True)
class _Texts:
    option: str
    values: str


TEXTS = _Texts(
    option=(
        "spec.engine.extraArgs: an item starting with '-' must be an option of vllm serve in a "
        "supported vLLM release (" + ", ".join(supported_releases()) + ") in a spelling its "
        "parser accepts (--name, --name=value, '_' for '-', --no-name of a boolean, --name.key "
        "JSON keys, -x, -xVALUE, -O3), written in full (no abbreviation: a later release may make "
        "it ambiguous), with no control characters and no '=value' on an option that takes none; "
        "names are lower case (vllm serve --help=all lists them)"
    ),
    values=(
        "is a value with no option before it that takes one: a value must follow an option "
        "that takes a value (with none attached by '='), or another value of an option that "
        "takes several; pass each option and each value as its own item"
    ),
)
VALUES_MESSAGE = "spec.engine.extraArgs: an item " + TEXTS.values
