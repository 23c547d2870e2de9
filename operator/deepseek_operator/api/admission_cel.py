"""The CEL half of offline admission: every ``x-kubernetes-validations`` rule, run as the API server does.

:func:`run_rules` evaluates the rules on one schema node with the ``cel`` package
(common-expression-language), cel-go's extension libraries (strings, lists, sets, math) and
Kubernetes' quantity library, which is registered here over a parser of Kubernetes'
``resource.Quantity`` grammar. A failure raises a :class:`~deepseek_operator.errors.SpecError`
naming the rule's field, its value and the rule's message; results are remembered per JSON value
(by its digest) since most of an object is unchanged from one generation to the next.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

import cel
from cel.stdlib import add_stdlib_to_context

from deepseek_operator.errors import SpecError
from deepseek_operator.recent import RecentMemory


@functools.cache
def _program(rule: str) -> Any:
    return cel.compile(rule)


# Kubernetes' resource.Quantity grammar (ParseQuantity), sign included; the exponent of a
# decimal-exponent suffix is an integer.
_QUANTITY = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_SUFFIX_FACTOR = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024**i) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"], start=1)},
}


def _quantity_value(text: Any) -> Decimal:
    """The number a Kubernetes quantity string stands for (the CEL quantity library's value)."""
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"quantities must match the quantity grammar: {text!r}")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    try:
        if suffix in _SUFFIX_FACTOR:  # "E" alone is exa; an exponent has digits after it
            value = Decimal(number) * _SUFFIX_FACTOR[suffix]
        else:
            value = Decimal(number) * Decimal(10) ** int(suffix[1:])
    except (InvalidOperation, OverflowError) as exc:
        raise ValueError(f"quantity out of range: {text!r}") from exc
    return -value if sign == "-" else value


def _is_quantity(text: Any) -> bool:
    try:
        _quantity_value(text)
    except ValueError:
        return False
    return True


def _compare_quantities(left: Any, right: Any) -> int:
    a, b = _quantity_value(left), _quantity_value(right)
    return (a > b) - (a < b)


def _context(value: Any) -> Any:
    # The Kubernetes CEL libraries the rules use (strings: lowerAscii, replace, split, join)
    # are cel-go's extension libraries, which cel.stdlib mirrors. Kubernetes' quantity library
    # is registered here: a quantity stays its string, its methods parse it (a method call
    # x.f(y) reaches the function f as f(x, y)).
    context = cel.Context()
    add_stdlib_to_context(context, ["strings", "lists", "sets", "math"])
    context.add_function("isQuantity", _is_quantity)
    context.add_function(
        "quantity", lambda text: text if _is_quantity(text) else _quantity_value(text)
    )
    context.add_function("compareTo", _compare_quantities)
    context.add_function("isInteger", lambda text: _quantity_value(text) % 1 == 0)
    context.add_function("isGreaterThan", lambda left, right: _compare_quantities(left, right) > 0)
    context.add_function("isLessThan", lambda left, right: _compare_quantities(left, right) < 0)
    context.add_function("asApproximateFloat", lambda text: float(_quantity_value(text)))
    context.add_function(
        "sub",
        lambda left, right: format(
            _quantity_value(left)
            - (Decimal(right) if isinstance(right, int) else _quantity_value(right)),
            "f",
        ),
    )
    context.add_function(
        "sign", lambda text: (_quantity_value(text) > 0) - (_quantity_value(text) < 0)
    )
    context.add_variable("self", value)
    return context


# (rule, fieldPath, message) of each rule on one schema node.
_Rules = tuple[tuple[str, str, str], ...]
# Where a value fails its rules: (field path, the offending value, the message).
_Failure = tuple[str, Any, str]

# Results remembered, most recently used last: (path, rules, digest of the value's JSON) → the
# failure or None. The key holds a 16-byte digest, not the JSON (a thousand DeepSeekServings of
# distinct specs kept about 3 MB of JSON text here), and rules shared per schema node.
_failures: RecentMemory[tuple[str, _Rules, bytes], _Failure | None] = RecentMemory(4096)
# One tuple per distinct rule set (the schema's nodes): equal sets built by each call share it.
_rule_sets: dict[_Rules, _Rules] = {}


def run_rules(path: str, value: Any, schema: dict[str, Any]) -> None:
    """Run the ``x-kubernetes-validations`` rules of ``schema`` on ``value`` (at ``path``)."""
    rules: _Rules = tuple(
        (r["rule"], r.get("fieldPath", ""), r["message"])
        for r in schema.get("x-kubernetes-validations", ())
    )
    if not rules:
        return
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):  # not JSON (a caller's odd value): evaluate it afresh
        failure = _first_failure(path, value, rules)
    else:
        failure = _remembered_failure(path, _rule_sets.setdefault(rules, rules), text)
    if failure is not None:
        raise SpecError(*failure)


def _remembered_failure(path: str, rules: _Rules, value_json: str) -> _Failure | None:
    """:func:`_first_failure` of a JSON value, remembered: the operator parses an object again
    on every new generation and most of its parts (the model, parallelism, …) are unchanged,
    and evaluating the CEL rules is most of a parse."""
    digest = hashlib.blake2b(value_json.encode(), digest_size=16).digest()
    return _failures.remembered(
        (sys.intern(path), rules, digest),
        lambda: _first_failure(path, json.loads(value_json), rules),
    )


def _first_failure(path: str, value: Any, rules: _Rules) -> _Failure | None:
    """The first of ``rules`` that ``value`` (at ``path``) fails, or None."""
    context = _context(value)
    for rule, field_path, message in rules:
        try:
            result = _program(rule).execute(context)
        except (ArithmeticError, ValueError, TypeError, RuntimeError) as exc:
            # The API server reports a rule that cannot be evaluated as a refusal too.
            return (path or "(root)", None, f"rule {rule!r}: {exc}")
        if result is not True:
            return ((path + field_path).lstrip("."), _lookup(value, field_path), message)
    return None


def _lookup(value: Any, field_path: str) -> Any:
    for part in [p for p in field_path.split(".") if p]:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
