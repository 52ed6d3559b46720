"""The snapshot's incremental updates give the same decisions as a fresh build."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine import Allocation, Cluster, Node, Tenant, VCluster, decide, parse_scenario

from .helpers import doc, node, run


def _scenario():
    return parse_scenario(copy.deepcopy(doc(
        {"kind": "class_cost"}, [node("n1"), node("n2")],
        [run("a", "n1", preemption_class=1, checkpoint="auto"), run("b", "n2", preemption_class=1,
                                                                     checkpoint="manual")],
        {"preemption_class": 5})))


def _cluster(s):
    return Cluster(s.nodes, s.running, s.tenants, s.vclusters, s.session_types, use_vclusters=s.has_vclusters)


def test_state_change_in_place_matches_a_fresh_snapshot():
    s = _scenario()
    live = _cluster(s)
    first = decide(live, s.policy, s.pending, s.now)
    assert [v.id for v in first.victims] == ["a"]  # auto (5) is cheaper than manual (10)
    assert live.set_state("a", "checkpointing")
    again = decide(live, s.policy, s.pending, s.now)
    from dataclasses import replace

    fresh = _cluster(replace(s, running=tuple(replace(r, state="checkpointing") if r.id == "a" else r
                                              for r in s.running)))
    expected = decide(fresh, s.policy, s.pending, s.now)
    assert again.to_dict() == expected.to_dict()
    assert [v.id for v in again.victims] == ["b"]
    assert {c.id: c.code for c in again.candidates}["a"] == "NOT_RUNNING"


def test_remove_and_add_match_a_fresh_snapshot():
    s = _scenario()
    live = _cluster(s)
    decide(live, s.policy, s.pending, s.now)  # warm the caches
    gone = live.remove("a")
    assert gone is not None
    assert decide(live, s.policy, s.pending, s.now).outcome == "fits"
    live.add(gone)
    assert decide(live, s.policy, s.pending, s.now).to_dict() == decide(_cluster(s), s.policy, s.pending,
                                                                        s.now).to_dict()


def test_a_kept_snapshot_keeps_a_bounded_number_of_cached_values():
    """Costs and orderings are cached per judging time: a snapshot kept across many passes must
    not keep every pass's."""
    s = _scenario()
    live = _cluster(s)
    passes = 200
    for i in range(passes):  # each judging as of its own time
        out = decide(live, s.policy, s.pending, s.now + 60 * i)
        assert [v.id for v in out.victims] == ["a"]
    assert 0 < len(live._cache) < passes  # keeping every pass's values would hold several per pass


_IDS = st.lists(st.one_of(st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=127), min_size=1,
                                  max_size=10),
                          st.integers(min_value=1, max_value=10**12).map(str),
                          st.text(min_size=1, max_size=3)),
                min_size=1, max_size=30, unique=True)


@given(ids=_IDS, leave=st.sets(st.integers(min_value=0, max_value=29)))
def test_the_id_order_is_code_point_order_while_allocations_come_and_go(ids, leave):
    """Ties between candidates break by id in code-point order; the order kept by the snapshot
    must be that one for any ids (short ASCII ones carry an integer key, others are sorted)."""
    s = _scenario()
    live = _cluster(s)
    template = s.running[0]
    for ident in ids:
        live.add(replace(template, id=ident))
    for i in sorted(leave):
        if i < len(ids):
            live.remove(ids[i])
    rank = live.id_rank()
    slots = [live.slot_of[i] for i in live.slot_of]
    assert sorted(slots, key=lambda slot: int(rank[slot])) == sorted(slots, key=lambda slot: str(live.a_ids[slot]))
    dead = [slot for slot in range(live.slots) if not live.alive[slot]]
    assert all(int(rank[d]) > int(rank[a]) for d in dead for a in slots)


_SLOT_COLUMNS = list(Cluster._SLOT_ARRAYS)


@given(st.lists(st.tuples(st.lists(st.sampled_from(["n0", "n1", "n2", "n3"]), min_size=1, max_size=3, unique=True),
                          st.sampled_from([None, "hpc", "ml", "other"]), st.sampled_from([None, 3, 40]),
                          st.sampled_from(["running", "checkpointing"]), st.sampled_from([0.0, 1.0, 2.5]),
                          st.sampled_from([None, "t1", "t2"]), st.booleans()),
                max_size=12))
def test_a_snapshot_built_at_once_equals_one_built_allocation_by_allocation(rows):
    nodes = [Node("n0", {"gpu": 8, "cpu": 8}, vcluster="hpc"), Node("n1", {"gpu": 8}, vcluster="ml", borrowed_by="hpc"),
             Node("n2", {"gpu": 4}, vcluster="ml", borrowed_by="hpc"), Node("n3", {"gpu": 8}, vcluster=None)]
    allocs = [Allocation(id=f"a{i}", vcluster=vc, rank=rank, state=state, tenant=tenant, sensitive=sens,
                         started_at=100.0 if rank else None, walltime_minutes=rank,
                         placement={n: ({"gpu": gpu, "cpu": 1.0} if n == "n0" else {"gpu": gpu}) for n in where})
              for i, (where, vc, rank, state, gpu, tenant, sens) in enumerate(rows)]
    vcs = [VCluster(name="hpc"), VCluster(name="ml")]
    tenants = [Tenant(name="t1", fair_share=0.5)]
    at_once = Cluster(nodes, allocs, tenants, vcs)
    one_by_one = Cluster(nodes, [], tenants, vcs)
    for a in allocs:
        one_by_one.add(a)
    for name in [*_SLOT_COLUMNS, "e_alloc", "e_node", "e_res", "e_alive", "used", "count", "t_used"]:
        mine, theirs = getattr(at_once, name), getattr(one_by_one, name)
        n = min(len(mine), len(theirs))
        assert np.array_equal(mine[:n], theirs[:n], equal_nan=mine.dtype.kind == "f"), name
    assert at_once.a_entries == one_by_one.a_entries
    assert at_once.slot_of == one_by_one.slot_of
    assert at_once.objs[:len(allocs)] == one_by_one.objs[:len(allocs)]
    assert at_once.tenant_index == one_by_one.tenant_index and at_once.user_index == one_by_one.user_index


@given(ids=_IDS)
def test_ids_of_a_snapshot_built_at_once_equal_those_added_one_by_one(ids):
    """The bulk build reads short ASCII ids (every one with an integer key) as one array of bytes
    and any others one by one; either way each slot's id and key are what ``add`` gives it."""
    s = _scenario()
    allocs = [replace(s.running[0], id=ident) for ident in ids]
    at_once = _cluster(replace(s, running=allocs))
    one_by_one = _cluster(replace(s, running=[]))
    for a in allocs:
        one_by_one.add(a)
    n = len(ids)
    assert at_once.a_ids[:n].tolist() == one_by_one.a_ids[:n].tolist()
    assert at_once.a_idkey[:n].tolist() == one_by_one.a_idkey[:n].tolist()
    assert at_once.slot_of == one_by_one.slot_of
