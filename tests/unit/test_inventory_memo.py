"""The inventory's memo keeps the most recently used results, not the first ones."""

from __future__ import annotations

from deepseek_operator.nodes.facts import MEMO_LIMIT, NodeInventory


def test_the_memo_drops_the_least_recently_used_key_and_keeps_a_hot_one() -> None:
    inventory = NodeInventory(nodes=())
    computed: list[object] = []

    def remember(key: object) -> object:
        def compute() -> object:
            computed.append(key)
            return key

        return inventory.memoized(key, compute)

    remember("hot")
    for i in range(MEMO_LIMIT * 2):
        remember(i)
        remember("hot")  # read by every decision, like a pool's candidates
    assert computed.count("hot") == 1, "a key in use was dropped"
    computed.clear()
    remember(MEMO_LIMIT * 2 - 1)  # among the latest
    remember(0)  # the oldest: dropped long ago
    assert computed == [0]
    assert len(inventory._memo) <= MEMO_LIMIT
