"""Section 4.1: preemption is the last resort (fits, borrowing, held nodes, gates)."""

from __future__ import annotations

from .helpers import codes, decide, doc, node, run, victims

CLASS = {"kind": "class_cost"}


def test_fits_on_free_capacity_without_victims_when_a_node_is_free():
    d = doc(CLASS, [node("n1"), node("n2")], [run("a", "n1", preemption_class=0, checkpoint="auto")],
            {"preemption_class": 9})
    out = decide(d)
    assert (out["outcome"], out["code"], out["nodes"], out["victims"]) == ("fits", "FITS", ["n2"], [])
    # eligible but not needed: spared, and class_cost shows its cost (auto 5 + no walltime 0)
    assert out["candidates"] == [{"id": "a", "verdict": "spared", "code": "NOT_NEEDED", "cost": 5.0}]


def test_fits_prefers_smallest_names_when_several_nodes_would_do():
    d = doc(CLASS, [node("n3"), node("n1"), node("n2")], [], {"nodes": 2})
    assert decide(d)["nodes"] == ["n1", "n2"]


def test_borrows_idle_node_within_lending_limit_when_home_is_full():
    vcs = [{"name": "hpc"}, {"name": "ml", "max_borrow_pct": 0.5}]
    d = doc(CLASS, [node("n1"), node("m1", vc="ml"), node("m2", vc="ml")],
            [run("h", "n1", preemption_class=9, checkpoint="auto")], {"preemption_class": 5, "checkpoint": "auto"},
            vclusters=vcs)
    out = decide(d)
    assert (out["outcome"], out["nodes"], out["borrowed"]) == ("fits", ["m1"], ["m1"])


def test_lending_limit_counts_nodes_already_lent():
    # ml has 2 nodes, 50% -> limit 1, and m2 is already lent to svc: nothing left to lend.
    vcs = [{"name": "hpc"}, {"name": "ml", "max_borrow_pct": 0.5}, {"name": "svc"}]
    d = doc(CLASS, [node("n1"), node("m1", vc="ml"), node("m2", vc="ml", borrowed_by="svc")],
            [run("h", "n1", preemption_class=9, checkpoint="auto")], {"preemption_class": 5, "checkpoint": "auto"},
            vclusters=vcs)
    out = decide(d)
    assert (out["outcome"], out["code"]) == ("wait", "NO_FEASIBLE_SET")


def test_non_preemptible_request_never_borrows():
    vcs = [{"name": "hpc"}, {"name": "ml", "max_borrow_pct": 1.0}]
    d = doc(CLASS, [node("n1"), node("m1", vc="ml")],
            [run("h", "n1", preemption_class=9, checkpoint="auto")],
            {"preemption_class": 8, "checkpoint": "none"}, vclusters=vcs)
    out = decide(d)
    assert out["outcome"] == "wait"
    assert out["nodes"] == [] and out["borrowed"] == []


def test_lender_that_disallows_lending_lends_nothing():
    vcs = [{"name": "hpc"}, {"name": "ml", "allow_lending": False, "max_borrow_pct": 1.0}]
    d = doc(CLASS, [node("n1"), node("m1", vc="ml")],
            [run("h", "n1", preemption_class=9, checkpoint="auto")], {"preemption_class": 5, "checkpoint": "auto"},
            vclusters=vcs)
    assert decide(d)["outcome"] == "wait"


def test_fits_with_fewest_borrowed_nodes():
    vcs = [{"name": "hpc"}, {"name": "ml", "max_borrow_pct": 1.0}]
    d = doc(CLASS, [node("a-ml", vc="ml"), node("z-home")], [], {"preemption_class": 5, "checkpoint": "auto"},
            vclusters=vcs)
    out = decide(d)
    assert (out["nodes"], out["borrowed"]) == (["z-home"], [])


def test_held_nodes_wait_for_victims_without_new_victims():
    d = doc(CLASS, [node("n1"), node("n2")],
            [run("a", "n1", preemption_class=0, checkpoint="auto", state="checkpointing"),
             run("b", "n2", preemption_class=0, checkpoint="auto")],
            {"preemption_class": 7, "held_nodes": ["n1"]})
    out = decide(d)
    assert (out["outcome"], out["code"], out["nodes"], out["victims"]) == ("wait", "AWAITING_VICTIMS", ["n1"], [])
    assert codes(out) == {"a": "NOT_RUNNING", "b": "NOT_NEEDED"}


def test_held_node_no_longer_usable_is_decided_afresh():
    d = doc(CLASS, [node("n1", state="down"), node("n2")],
            [run("a", "n1", preemption_class=0, checkpoint="auto", state="checkpointing"),
             run("b", "n2", preemption_class=0, checkpoint="auto")],
            {"preemption_class": 7, "held_nodes": ["n1"]})
    out = decide(d)
    assert (out["outcome"], victims(out), out["nodes"]) == ("preempt", ["b"], ["n2"])


def test_gates_in_order_disabled_then_paused_then_not_preemptive():
    base = ([node("n1")], [run("a", "n1", preemption_class=0, checkpoint="auto")])
    assert decide(doc({"kind": "class_cost", "enabled": False, "paused": True}, *base,
                      {"preemption_class": 5, "preemptive": False}))["code"] == "PREEMPTION_DISABLED"
    assert decide(doc({"kind": "class_cost", "paused": True}, *base,
                      {"preemption_class": 5, "preemptive": False}))["code"] == "PREEMPTION_PAUSED"
    out = decide(doc(CLASS, *base, {"preemption_class": 5, "preemptive": False}))
    assert (out["outcome"], out["code"]) == ("wait", "NOT_PREEMPTIVE")
    assert codes(out) == {"a": "NOT_NEEDED"}


def test_no_usable_nodes_when_request_is_larger_than_any_node():
    d = doc(CLASS, [node("n1")], [run("a", "n1", preemption_class=0, checkpoint="auto")],
            {"preemption_class": 5, "per_node": {"gpu": 16}})
    out = decide(d)
    assert (out["outcome"], out["code"]) == ("wait", "NO_USABLE_NODES")
    assert codes(out) == {"a": "NOT_ON_USABLE_NODE"}


def test_labels_and_same_constraint_choose_nodes_on_one_switch():
    nodes = [node("n1", labels={"switch": "s1"}), node("n2", labels={"switch": "s2"}),
             node("n3", labels={"switch": "s2"}), node("n4", labels={"switch": "s1"})]
    running = [run("a", "n1", preemption_class=9, checkpoint="auto")]
    d = doc(CLASS, nodes, running, {"nodes": 2, "constraints": {"same": "switch"}})
    assert decide(d)["nodes"] == ["n2", "n3"]
    d = doc(CLASS, nodes, running, {"nodes": 1, "constraints": {"labels": {"switch": "s1"}}})
    assert decide(d)["nodes"] == ["n4"]


def test_exclusive_request_needs_an_empty_node():
    d = doc(CLASS, [node("n1", gpu=16), node("n2")],
            [run("a", "n1", gpu=1, preemption_class=0, checkpoint="auto")],
            {"preemption_class": 0, "exclusive": True, "per_node": {"gpu": 4}})
    assert decide(d)["nodes"] == ["n2"]


def test_vcluster_null_request_uses_every_node_as_its_own():
    d = doc(CLASS, [node("m1", vc="ml")], [], {"vcluster": None},
            vclusters=[{"name": "hpc"}, {"name": "ml", "allow_lending": False}])
    out = decide(d)
    assert (out["nodes"], out["borrowed"]) == (["m1"], [])


def test_summary_keeps_victims_and_chosen_nodes_and_counts_the_rest():
    from scheduling.engine import decide_scenario, parse_scenario

    nodes = [node(f"n{i}") for i in range(6)]
    running = [run(f"a{i}", f"n{i}", preemption_class=1 if i == 0 else 9, checkpoint="auto") for i in range(6)]
    d = decide_scenario(parse_scenario(doc(CLASS, nodes, running, {"preemption_class": 5})))
    rows, counts = d.summary(3)
    assert [(c.id, c.code) for c in rows] == [("a0", "SELECTED")]
    assert counts == {"CLASS_NOT_LOWER": 5}
    rows, counts = d.summary(100)
    assert len(rows) == 6 and counts == {}


def test_summary_of_a_wait_on_held_nodes_keeps_their_candidates_and_counts_the_rest():
    from scheduling.engine import decide_scenario, parse_scenario

    nodes = [node(f"n{i}") for i in range(6)]
    running = [run("a0", "n0", preemption_class=0, checkpoint="auto", state="checkpointing")]
    running += [run(f"a{i}", f"n{i}", preemption_class=0, checkpoint="auto") for i in range(1, 6)]
    d = decide_scenario(parse_scenario(doc(CLASS, nodes, running, {"preemption_class": 7, "held_nodes": ["n0"]})))
    assert (d.outcome, d.code) == ("wait", "AWAITING_VICTIMS")
    rows, counts = d.summary(3)
    assert [(c.id, c.code) for c in rows] == [("a0", "NOT_RUNNING")]
    assert counts == {"NOT_NEEDED": 5}
    rows, counts = d.summary(100)
    assert len(rows) == 6 and counts == {}
