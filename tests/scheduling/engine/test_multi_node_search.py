"""class_cost's search against a brute-force oracle on contests of up to 30 eligible candidates:
whole- and partial-node requests for one to four nodes, gangs across nodes, bounded and not."""

from __future__ import annotations

import copy
import random
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import decide_scenario, parse_scenario, select_multi

from . import victim_oracle as vo
from .helpers import doc, node, run


def _decide(d: dict[str, Any]) -> dict[str, Any]:
    return decide_scenario(parse_scenario(copy.deepcopy(d))).to_dict()


@st.composite
def contests(draw: Any) -> dict[str, Any]:
    many = draw(st.booleans())
    return vo.generate(lambda xs: draw(st.sampled_from(list(xs))), min_eligible=21 if many else 0)


@settings(max_examples=60, deadline=None)
@given(contests())
def test_never_waits_when_a_valid_set_exists_and_the_chosen_set_is_valid(d: dict[str, Any]) -> None:
    out = _decide(d)
    if vo.oracle.fits(d, set()):
        assert out["outcome"] == "fits"
        return
    victims = {v["id"] for v in out["victims"]}
    if vo.valid_set_exists(d):
        assert out["outcome"] == "preempt", (out["code"], len(vo.eligible(d)))
    else:
        assert out["outcome"] == "wait"
    if out["outcome"] == "preempt":
        assert vo.is_valid(d, victims)
        assert all(vo.oracle.node_fits(d, name, victims) for name in out["nodes"])
        for v in victims:  # minimal
            assert not vo.oracle.fits(d, victims - {v}), f"{v} was not needed"


def test_cost_within_a_tenth_of_the_optimum_in_95_percent_of_contests() -> None:
    ratios = []
    for seed in range(80):
        rnd = random.Random(seed)
        d = vo.generate(lambda xs, rnd=rnd: rnd.choice(list(xs)), min_eligible=21, multi=True)
        if d["policy"]["max_victims"] is None:
            d["policy"]["max_victims"] = 4  # the oracle enumerates subsets: keep them countable
        if vo.oracle.fits(d, set()):
            continue
        best = vo.best_set(d)
        out = _decide(d)
        if best is None:
            assert out["outcome"] == "wait"
            continue
        if out["outcome"] != "preempt":
            ratios.append(float("inf"))  # waited although a valid set exists
            continue
        paid = vo.set_cost(d, [v["id"] for v in out["victims"]])
        ratios.append(paid / best[0] if best[0] > 0 else (1.0 if paid == 0 else float("inf")))
    assert len(ratios) >= 40
    assert min(ratios) >= 1.0 - 1e-9  # nothing cheaper than the optimum: the oracle is sound
    assert sum(r <= 1.1 for r in ratios) >= 0.95 * len(ratios), sorted(ratios)[-5:]


@pytest.mark.parametrize("others", [7, 12])  # 25 eligible (exact search), 40 (the large one)
def test_a_gang_within_the_bound_is_found_where_cheap_singles_exceed_it(others: int) -> None:
    # Three nodes each hold one share of gang G (4 GPUs, cost 10) and a single job (4 GPUs, cost
    # 1); the request wants 4 GPUs on three nodes with at most one victim: only G will do. Other
    # nodes' eligible work brings the count past 20, or past 30.
    nodes = [node(f"n{i}") for i in range(3 + others)]
    running = [run("G", {"n0": 4, "n1": 4, "n2": 4}, checkpoint="auto", checkpoint_minutes=10, preemption_class=1)]
    running += [run(f"s{i}", f"n{i}", gpu=4, checkpoint="auto", checkpoint_minutes=1, preemption_class=1)
                for i in range(3)]
    running += [run(f"x{i}{j}", f"n{i}", gpu=g, checkpoint="auto", checkpoint_minutes=40, preemption_class=1)
                for i in range(3, 3 + others) for j, g in enumerate((4, 2, 2))]
    out = _decide(doc({"kind": "class_cost", "max_victims": 1}, nodes, running,
                      {"nodes": 3, "per_node": {"gpu": 4}, "preemption_class": 5}))
    assert out["outcome"] == "preempt", out["code"]
    assert [v["id"] for v in out["victims"]] == ["G"]


@pytest.mark.parametrize("count", [8, 12])  # 24 eligible (exact search), 36 (the large one)
def test_pairs_of_small_jobs_beat_one_large_job_per_node(count: int) -> None:
    # Per node: two 2-GPU jobs costing 1 each and a 4-GPU job costing 5; 4 GPUs wanted on two
    # nodes. The pairs cost 4 in all, the large jobs 10.
    nodes = [node(f"n{i}") for i in range(count)]
    running = [run(f"{name}{i}", f"n{i}", gpu=g, checkpoint="auto", checkpoint_minutes=c, preemption_class=1)
               for i in range(count) for name, g, c in (("a", 2, 1), ("b", 2, 1), ("c", 4, 5 + i))]
    out = _decide(doc({"kind": "class_cost", "max_victims": None}, nodes, running,
                      {"nodes": 2, "per_node": {"gpu": 4}, "preemption_class": 5}))
    assert sorted(v["id"] for v in out["victims"]) == ["a0", "a1", "b0", "b1"]


def test_partial_requests_take_the_cheap_small_jobs_not_whole_nodes() -> None:
    # Two nodes of 8 GPUs, each with one cheap 2-GPU job and an expensive 6-GPU one; the request
    # wants 2 GPUs on each of two nodes. Freeing whole nodes would take the expensive jobs.
    nodes = [node("n0"), node("n1")]
    running = [run("cheap0", "n0", gpu=2, checkpoint="auto", checkpoint_minutes=1, preemption_class=1),
               run("dear0", "n0", gpu=6, checkpoint="auto", checkpoint_minutes=50, preemption_class=1),
               run("cheap1", "n1", gpu=2, checkpoint="auto", checkpoint_minutes=1, preemption_class=1),
               run("dear1", "n1", gpu=6, checkpoint="auto", checkpoint_minutes=50, preemption_class=1)]
    running += [run(f"filler{i}", "n0", gpu=0, preemption_class=1) for i in range(20)]
    out = _decide(doc({"kind": "class_cost"}, nodes, running,
                      {"nodes": 2, "per_node": {"gpu": 2}, "preemption_class": 5}))
    assert out["outcome"] == "preempt"
    assert sorted(v["id"] for v in out["victims"]) == ["cheap0", "cheap1"]


def test_a_gang_freeing_two_nodes_is_paid_once() -> None:
    # One gang across n0 and n1 costs 10; two single jobs cost 6 each: the gang is cheaper.
    nodes = [node("n0"), node("n1"), node("n2")]
    running = [run("gang", {"n0": 8, "n1": 8}, checkpoint="auto", checkpoint_minutes=10, preemption_class=1),
               run("s2", "n2", checkpoint="auto", checkpoint_minutes=6, preemption_class=1)]
    out = _decide(doc({"kind": "class_cost"}, nodes, running,
                      {"nodes": 2, "per_node": {"gpu": 8}, "preemption_class": 5}))
    assert [v["id"] for v in out["victims"]] == ["gang"]


@st.composite
def multi_node_contests(draw: Any) -> dict[str, Any]:
    many = draw(st.booleans())
    return vo.generate(lambda xs: draw(st.sampled_from(list(xs))), min_eligible=21 if many else 0, multi=True)


@settings(max_examples=80, deadline=None)
@given(multi_node_contests())
def test_the_victim_count_bound_leaves_every_decision_as_the_full_search_makes_it(d: dict[str, Any]) -> None:
    # The bound only turns away groups where no set within max_victims exists: without it the
    # searches run and must come to the very same decision.
    bounded = _decide(d)
    with mock.patch.object(select_multi, "victims_needed", lambda *args: 0):
        searched = _decide(d)
    assert bounded == searched


@pytest.mark.parametrize(("gang", "outcome"), [(False, "wait"), (True, "preempt")])
def test_four_nodes_need_four_single_victims_but_one_gang_across_them(gang: bool, outcome: str) -> None:
    # Four nodes of one 8-GPU job each, at most three victims: four single jobs are one too many,
    # one gang on all four nodes is a single victim. Both decided by the full search (bound off).
    nodes = [node(f"n{i}") for i in range(4)]
    if gang:
        running = [run("g", {f"n{i}": 8 for i in range(4)}, checkpoint="auto", preemption_class=1)]
    else:
        running = [run(f"s{i}", f"n{i}", checkpoint="auto", preemption_class=1) for i in range(4)]
    d = doc({"kind": "class_cost", "max_victims": 3}, nodes, running,
            {"nodes": 4, "per_node": {"gpu": 8}, "preemption_class": 5})
    out = _decide(d)
    assert out["outcome"] == outcome, out["code"]
    with mock.patch.object(select_multi, "victims_needed", lambda *args: 0):
        assert _decide(d) == out
