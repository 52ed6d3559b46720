"""``add`` and ``remove`` on a few resources work element by element, and a reused slot whose
fields are those it was last written from is not written again: the columns must be, to the bit,
what the array operations writing every column give."""

from __future__ import annotations

from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduling.engine import Allocation, Cluster, Node, Tenant, snapshot_update

_NODES = [Node("n0", {"gpu": 8, "cpu": 1.0}), Node("n1", {"gpu": 4}), Node("n2", {"gpu": 8, "cpu": 0.3})]
_AMOUNTS = st.sampled_from([0.0, 0.1, 1 / 3, 2.5])
_IDS = st.sampled_from(["a", "hold:1", "hold:22"])
# Few values per field, so that a slot is often reused by an allocation with the same fields.
_ADD = st.tuples(st.just("add"), _IDS, st.lists(st.sampled_from(["n0", "n1", "n2"]), min_size=1, max_size=3, unique=True),
                 _AMOUNTS, _AMOUNTS, st.sampled_from([None, 0.0, -0.0]), st.sampled_from([None, "t1"]),
                 st.sampled_from(["running", "terminating"]), st.sampled_from([0, 3]))
_REMOVE = st.tuples(st.just("remove"), _IDS)
_STATE = st.tuples(st.just("state"), _IDS, st.sampled_from(["running", "checkpointing"]))
_COLUMNS = [*Cluster._SLOT_ARRAYS, "e_alloc", "e_node", "e_res", "e_alive", "used", "count", "t_used"]


def _replay(ops: list[tuple], plain: bool) -> Cluster:
    cluster = Cluster(_NODES, [], [Tenant(name="t1", fair_share=0.5)])
    for op in ops:
        if op[0] == "add":
            _, ident, where, gpu, cpu, started, tenant, state, klass = op
            if plain:
                cluster._slot_src.clear()  # every column written again
            cluster.add(Allocation(id=ident, tenant=tenant, state=state, preemption_class=klass, started_at=started,
                                   placement={n: {"gpu": gpu, "cpu": cpu} for n in where}))
        elif op[0] == "remove":
            cluster.remove(op[1])
        else:
            cluster.set_state(op[1], op[2])
    return cluster


_ONE = ["n0"]


@settings(max_examples=300)
@given(st.lists(st.one_of(_ADD, _REMOVE, _STATE), max_size=30))
# A slot left by an allocation whose state changed, then reused with the fields it was written from.
@example([("add", "a", _ONE, 1.0, 0.0, None, None, "running", 0), ("state", "a", "checkpointing"),
          ("remove", "a"), ("add", "a", _ONE, 1.0, 0.0, None, None, "running", 0)])
# A reused slot whose start differs only in the sign of zero.
@example([("add", "a", _ONE, 1.0, 0.0, 0.0, None, "running", 0), ("remove", "a"),
          ("add", "hold:1", _ONE, 1.0, 0.0, -0.0, None, "running", 0)])
def test_updates_give_the_columns_of_array_operations_writing_every_column(ops):
    kept = _replay(ops, plain=False)
    with mock.patch.object(snapshot_update, "FEW_RESOURCES", 0):
        plain = _replay(ops, plain=True)
    for name in _COLUMNS:
        assert getattr(kept, name).tobytes() == getattr(plain, name).tobytes(), name
    assert kept.a_entries == plain.a_entries and kept.slot_of == plain.slot_of
