"""Which entries (rows of the snapshot's entry columns) each allocation slot holds.

A snapshot built at once lays each allocation's entries out as one run of positions, slot after
slot, so those are kept as the runs' bounds (one list of integers) and a slot's positions are a
``range`` made when asked for, instead of 500,000 lists made at build time that most passes
never read. Slots set since (an allocation added, or one replaced) keep their own list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class SlotEntries:
    """A mapping slot -> its entries' positions, in its nodes' name order; a slot without
    entries (dead, or never used) is not in it."""

    __slots__ = ("_bounds", "_built", "_own")

    def __init__(self, bounds: Sequence[int] = (0,)) -> None:
        # Slot s of the bulk build holds positions bounds[s] to bounds[s + 1]; _built[s] says
        # whether it still does (0 once removed or set again).
        self._bounds = list(bounds)
        self._built = bytearray(b"\x01") * (len(self._bounds) - 1)
        self._own: dict[int, Sequence[int]] = {}

    def _from_build(self, slot: int) -> bool:
        return 0 <= slot < len(self._built) and self._built[slot] == 1

    def __getitem__(self, slot: int) -> Sequence[int]:
        own = self._own.get(slot)
        if own is not None:
            return own
        if self._from_build(slot):
            return range(self._bounds[slot], self._bounds[slot + 1])
        raise KeyError(slot)

    def get(self, slot: int, default: Sequence[int]) -> Sequence[int]:
        try:
            return self[slot]
        except KeyError:
            return default

    def __setitem__(self, slot: int, entries: Sequence[int]) -> None:
        if self._from_build(slot):
            self._built[slot] = 0
        self._own[slot] = entries

    def pop(self, slot: int) -> Sequence[int]:
        entries = self[slot]
        if slot in self._own:
            del self._own[slot]
        else:
            self._built[slot] = 0
        return entries

    def __contains__(self, slot: object) -> bool:
        try:
            self[slot]  # type: ignore[index]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[int]:
        built = (s for s, live in enumerate(self._built) if live and s not in self._own)
        yield from sorted([*built, *self._own])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def as_dict(self) -> dict[int, list[int]]:
        return {s: list(self[s]) for s in self}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SlotEntries):
            return self.as_dict() == other.as_dict()
        if isinstance(other, dict):
            return self.as_dict() == {s: list(e) for s, e in other.items()}
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
