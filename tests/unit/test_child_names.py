"""The one name scheme of a serving's children (names.CHILD_NAMES): complete, and no two
servings that admission lets in can take one name, whichever layout each has."""

from __future__ import annotations

import copy
import itertools
import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator import names
from deepseek_operator.actions import PAIR_HELD_BY_NAME, write_actions
from deepseek_operator.api.load import parse_serving
from deepseek_operator.api.roles import ROLE_KINDS
from deepseek_operator.errors import SpecError
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-12-04T00:00:00Z"


def _doc(example: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / example).read_text())
    return doc


def _admitted(name: str) -> bool:
    doc = _doc("dsv41-flash-gb200.yaml")
    doc["metadata"] = {"name": name}
    try:
        parse_serving(doc)
    except SpecError:
        return False
    return True


def test_the_role_names_are_the_api_roles() -> None:
    assert names.PD_ROLE_NAMES == ROLE_KINDS


def test_the_reserved_endings_today() -> None:
    assert names.RESERVED_NAME_ENDINGS == ("-api", "-decode", "-prefill")


def test_no_two_admitted_servings_share_a_child_name() -> None:
    # Servings <a> and <a>+u take one name exactly when t1 = u + t2 for suffixes of one kind:
    # try every such u on a few names, through the real admission (CEL) rules.
    clashes = [
        t1[: len(t1) - len(t2)]
        for (k1, t1), (k2, t2) in itertools.product(names.CHILD_NAMES, repeat=2)
        if k1 == k2 and t1 != t2 and t1.endswith(t2)
    ]
    assert clashes  # the scheme has overlapping suffixes; each must be refused
    for base, u in itertools.product(("x", "dsv4", "a-b1"), clashes):
        if u.endswith("-"):
            continue  # no DNS-1035 label ends in '-'
        assert not _admitted(base + u), base + u


SERVINGS = [
    ("dsv41-flash-gb200.yaml", "nodes-gb200.yaml", None),
    ("dsv41-flash-dep8-nvl72.yaml", "nodes-gb200-nvl72.yaml", None),
    ("dsv41-flash-1p1d-gb200.yaml", "nodes-gb200.yaml", {"name": "epp", "port": 9002}),
    ("dsv4-pro-3p2d-nvl72.yaml", "nodes-gb200-nvl72.yaml", None),
]


@pytest.mark.parametrize(("example", "nodes", "picker"), SERVINGS)
def test_every_rendered_child_is_named_by_the_scheme(
    example: str, nodes: str, picker: dict[str, Any] | None
) -> None:
    doc = _doc(example)
    if picker:
        doc["spec"]["disaggregation"]["endpointPicker"] = picker
    serving = parse_serving(copy.deepcopy(doc))
    inventory = build_inventory(_doc(nodes)["items"])
    objects = plan(serving, inventory, Observed.offline(), NOW).objects
    assert objects
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        assert name.startswith(serving.name), name
        assert (kind, name[len(serving.name) :]) in names.CHILD_NAMES, (kind, name)


def test_a_pair_with_a_stranger_in_the_way_writes_no_child() -> None:
    doc = _doc("dsv41-flash-1p1d-gb200.yaml")
    planned = plan(
        parse_serving(doc), build_inventory(_doc("nodes-gb200.yaml")["items"]), Observed(), NOW
    )
    stranger = {("Deployment", "dsv41-pd-prefill"): {"metadata": {"name": "dsv41-pd-prefill"}}}
    for pair in (True, False):
        writes = write_actions(
            planned.objects, {}, stranger, {}, {}, owner_name="dsv41-pd", pair=pair
        )
        assert writes.foreign[0].startswith("Deployment/dsv41-pd-prefill already exists")
        if pair:
            assert writes.applies == [] and writes.foreign[-1] == PAIR_HELD_BY_NAME
        else:  # an aggregated serving's other children are written as before
            assert writes.applies and PAIR_HELD_BY_NAME not in writes.foreign
