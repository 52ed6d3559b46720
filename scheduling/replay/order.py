"""The pending queue of the incremental replay, kept in the pass's order (``passes.ordering.queue_key``)
instead of sorted again at every pass; and its requests' resource shapes (``PendingShapes``).

In every kind but ``fair_share`` a request's key does not change while it waits: one sorted list.
In ``fair_share`` the key's first terms are its tenant's (starving, deficit), which move with the
shares, and the rest (submission, id) do not: a sorted list per tenant, merged lazily under the
tenants' keys of the moment, so a pass that stops early reads only the head of the queue.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from itertools import islice


class PendingOrder:
    def __init__(self, fair_share: bool) -> None:
        self.fair_share = fair_share
        self._one: list[tuple] = []  # (key, idx)
        self._by_tenant: dict[str, list[tuple]] = {}  # tenant -> [(submit, idx)]
        self._key: dict[int, tuple] = {}
        self._tenant: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._key)

    def add(self, idx: int, key: tuple, tenant: str, submit: float) -> None:
        if self.fair_share:
            entry: tuple = (submit, idx)
            insort(self._by_tenant.setdefault(tenant, []), entry)
        else:
            entry = (key, idx)
            insort(self._one, entry)
        self._key[idx], self._tenant[idx] = entry, tenant

    def discard(self, idx: int) -> None:
        entry = self._key.pop(idx, None)
        if entry is None:
            return
        tenant = self._tenant.pop(idx)
        rows = self._by_tenant[tenant] if self.fair_share else self._one
        del rows[bisect_left(rows, entry)]

    def ordered(self, tenant_key: Callable[[str], tuple], limit: int) -> Iterator[int]:
        """The first ``limit`` requests in the pass's order, read lazily (the pass removes each
        request it starts, after reading it, and adds none). In fair_share ``tenant_key`` gives a
        tenant's first terms of the key now, and a request's key is them, then its (submission,
        id): the tenants in that order, each one's queue whole, merged only among tenants whose
        terms are equal."""
        if not self.fair_share:
            return (idx for _, idx in self._one[:limit])
        tied: dict[tuple, list[list[tuple]]] = {}
        for tenant, rows in self._by_tenant.items():
            if rows:
                tied.setdefault(tenant_key(tenant), []).append(rows)
        return islice(_tenants_in_order(tied), limit)

    def head(self) -> int | None:
        """The first request (in a kind other than fair_share, whose first terms move)."""
        return self._one[0][1] if self._one else None


Shape = tuple[int, float, float]  # (nodes, gpus, cpus per node)


class PendingShapes:
    """The pending requests' resource shapes, counted, with the least of them: those that no
    other pending shape is at most in every term. A shape that fits (or, once victims left,
    could) means that every shape at most it in every term does too, so whether any pending
    request could is whether one of the least could."""

    def __init__(self) -> None:
        self._count: dict[Shape, int] = {}
        self._least: list[Shape] | None = None

    def __len__(self) -> int:
        return len(self._count)

    def add(self, shape: Shape) -> None:
        before = self._count.get(shape, 0)
        self._count[shape] = before + 1
        if not before:
            self._least = None

    def discard(self, shape: Shape) -> None:
        left = self._count[shape] - 1
        if left:
            self._count[shape] = left
        else:
            del self._count[shape]
            self._least = None

    def least(self) -> list[Shape]:
        if self._least is None:
            shapes = list(self._count)
            self._least = [s for s in shapes if not any(
                o != s and o[0] <= s[0] and o[1] <= s[1] and o[2] <= s[2] for o in shapes)]
        return self._least


def _tenants_in_order(tied: dict[tuple, list[list[tuple]]]) -> Iterator[int]:
    for key in sorted(tied):
        queues = tied[key]
        if len(queues) == 1:
            yield from (idx for _, idx in _walk(queues[0]))
        else:
            yield from (idx for _, idx in heapq.merge(*map(_walk, queues)))


def _walk(rows: list[tuple]) -> Iterator[tuple]:
    """A tenant's (submission, id) entries in order, read from the live list: each next one is
    found after the last one read, so that its removal meanwhile skips nothing."""
    i = 0
    while i < len(rows):
        entry = rows[i]
        yield entry
        i = bisect_right(rows, entry)
