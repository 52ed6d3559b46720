"""The replay's kept queue against a plain sort by the pass's key, while the pass starts (removes)
some of what it reads."""

from __future__ import annotations

import random

import pytest

from scheduling.replay.order import PendingOrder


@pytest.mark.parametrize("seed", range(30))
def test_fair_share_order_is_the_sorted_key_order_while_read_requests_leave(seed: int) -> None:
    rnd = random.Random(seed)
    tenants = [f"t{i}" for i in range(rnd.randint(1, 6))]
    # Standings with ties: several tenants share the same (starving, deficit) terms.
    standing = {t: (rnd.choice([0, 1]), -rnd.choice([0.0, 0.25, 0.5])) for t in tenants}
    order = PendingOrder(fair_share=True)
    rows = {}
    for idx in range(rnd.randint(0, 60)):
        tenant, submit = rnd.choice(tenants), float(rnd.randint(0, 20))
        order.add(idx, (), tenant, submit)
        rows[idx] = (tenant, submit)
    limit = rnd.randint(1, 70)
    expected = sorted(rows, key=lambda i: (*standing[rows[i][0]], rows[i][1], i))[:limit]
    read = []
    for idx in order.ordered(standing.__getitem__, limit):
        read.append(idx)
        if rnd.random() < 0.5:
            order.discard(idx)  # started: the pass removes it after reading it
    assert read == expected
