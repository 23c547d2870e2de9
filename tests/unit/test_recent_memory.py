"""RecentMemory (recent.py): the one bounded memo behind the inventory, CEL and parse memories."""

from __future__ import annotations

from deepseek_operator.recent import RecentMemory


def test_the_least_recently_used_entry_goes_first_and_a_remembered_none_counts() -> None:
    memory: RecentMemory[str, int | None] = RecentMemory(2)
    calls: list[str] = []

    def compute(key: str, value: int | None) -> int | None:
        calls.append(key)
        return value

    assert memory.remembered("a", lambda: compute("a", None)) is None
    assert memory.remembered("a", lambda: compute("a", 1)) is None  # None was remembered
    memory.put("b", 2)
    assert memory.get("a") is None and calls == ["a"]  # a use: "a" is now the most recent
    memory.put("c", 3)  # over the limit: "b" is the least recently used
    assert len(memory) == 2
    assert memory.get("b") is None
    assert memory.get("c") == 3
    memory.pop("c")
    memory.pop("missing")
    assert len(memory) == 1
    assert memory.remembered("a", lambda: compute("a", 5)) is None and calls == ["a"]
