"""Section 4.3/4.4: reclaim and the five policy kinds, each rule computed by hand."""

from __future__ import annotations

import pytest

from .helpers import codes, decide, doc, node, run, victims

# -- class_cost ---------------------------------------------------------------------

def _cost_of(alloc: dict, tenants: list | None = None, extra_running: list | None = None) -> float:
    extra = {"tenants": tenants} if tenants else {}
    d = doc({"kind": "class_cost"}, [node("n1"), node("n2")], [alloc, *(extra_running or [])],
            {"preemption_class": 9}, **extra)
    return next(c["cost"] for c in decide(d)["candidates"] if c["id"] == alloc["id"])


def test_cost_lost_work_is_gpu_hours_since_last_checkpoint():
    # none: 2 h since the later of start (10:00) and checkpoint (10:00 -> start wins) x 1 node x 8 GPUs
    a = run("a", "n1", preemption_class=1, checkpoint="none", started_at="2026-05-01T10:00:00Z")
    assert _cost_of(a) == pytest.approx(16.0)
    a["last_checkpoint_at"] = "2026-05-01T11:30:00Z"  # 0.5 h x 8
    assert _cost_of(a) == pytest.approx(4.0)


def test_cost_lost_work_counts_gpus_on_first_node_and_every_node():
    a = run("a", {"n2": 2, "n1": 3}, preemption_class=1, checkpoint="none", started_at="2026-05-01T11:00:00Z")
    assert _cost_of(a) == pytest.approx(1 * 2 * 3)  # first node in name order is n1 (3 GPUs)
    cpu_only = {"id": "b", "vcluster": "hpc", "started_at": "2026-05-01T11:00:00Z", "checkpoint": "none",
                "placement": {"n1": {"cpu": 4}}}
    assert _cost_of(cpu_only) == pytest.approx(1.0)  # holds no GPU: counts as 1


@pytest.mark.parametrize(("walltime", "term"), [(600, 10.0), (60 / 0.09, 1.0), (66, 1000.0), (120, 50.0),
                                                 (60 / 0.9, 1000.0)])
def test_cost_walltime_term_bands(walltime, term):
    a = run("a", "n1", preemption_class=1, checkpoint="manual", walltime_minutes=walltime)
    # manual checkpoint term: checkpoint_timeout_minutes default 10; elapsed 60 minutes
    assert _cost_of(a) == pytest.approx(10 + term)


def test_cost_halved_when_bursting_tenant_is_above_fair_share():
    tenants = [{"name": "t", "fair_share": 0.25, "burst_allowance": 1.5}]
    a = run("a", "n1", preemption_class=1, checkpoint="auto", tenant="t")  # holds 8/16 = 0.5 > 0.25
    assert _cost_of(a, tenants) == pytest.approx(2.5)
    tenants[0]["fair_share"] = 0.5  # not strictly above
    assert _cost_of(a, tenants) == pytest.approx(5.0)


def test_class_cost_prefers_cheapest_set_then_fewer_victims():
    # n1: one victim costing 12; n2: two victims costing 5 + 5 = 10 -> the cheaper pair wins.
    running = [run("big", "n1", preemption_class=1, checkpoint="auto", checkpoint_minutes=12),
               run("s1", {"n2": 4}, preemption_class=1, checkpoint="auto"),
               run("s2", {"n2": 4}, preemption_class=1, checkpoint="auto")]
    out = decide(doc({"kind": "class_cost"}, [node("n1"), node("n2")], running, {"preemption_class": 5}))
    assert (victims(out), out["nodes"]) == (["s1", "s2"], ["n2"])
    running[0]["checkpoint_minutes"] = 10  # tie at 10: fewer victims wins
    out = decide(doc({"kind": "class_cost"}, [node("n1"), node("n2")], running, {"preemption_class": 5}))
    assert (victims(out), out["nodes"]) == (["big"], ["n1"])


def test_class_cost_two_small_victims_beat_one_large_on_the_same_node():
    # One node, full: "big" alone frees the 4 GPUs asked for at cost 12; the two small ones free
    # them together at 5 + 5 = 10, which is the cheapest feasible set (found by hypothesis).
    running = [run("big", "n1", gpu=4, preemption_class=1, checkpoint="auto", checkpoint_minutes=12),
               run("s1", "n1", gpu=2, preemption_class=1, checkpoint="auto"),
               run("s2", "n1", gpu=2, preemption_class=1, checkpoint="auto")]
    out = decide(doc({"kind": "class_cost"}, [node("n1")], running, {"preemption_class": 5, "per_node": {"gpu": 4}}))
    assert (victims(out), out["nodes"]) == (["s1", "s2"], ["n1"])
    assert sum(v["cost"] for v in out["victims"]) == pytest.approx(10.0)


def test_class_cost_exceeds_max_victims_when_only_large_sets_fit():
    running = [run(f"a{i}", {"n1": 2}, preemption_class=1, checkpoint="auto") for i in range(4)]
    out = decide(doc({"kind": "class_cost"}, [node("n1")], running, {"preemption_class": 5}))
    assert (out["outcome"], out["code"]) == ("wait", "EXCEEDS_MAX_VICTIMS")
    out = decide(doc({"kind": "class_cost", "max_victims": None}, [node("n1")], running, {"preemption_class": 5}))
    assert victims(out) == ["a0", "a1", "a2", "a3"]


def test_class_cost_equal_cost_tie_goes_to_latest_earliest_start_then_ids():
    running = [run("old", "n1", preemption_class=1, checkpoint="auto", started_at="2026-05-01T09:00:00Z"),
               run("new", "n2", preemption_class=1, checkpoint="auto", started_at="2026-05-01T10:00:00Z"),
               run("new2", "n3", preemption_class=1, checkpoint="auto", started_at="2026-05-01T10:00:00Z")]
    out = decide(doc({"kind": "class_cost"}, [node("n1"), node("n2"), node("n3")], running,
                     {"preemption_class": 5}))
    assert victims(out) == ["new"]


# -- reclaim ------------------------------------------------------------------------

def _reclaim_doc(rule: str, borrower_class: int) -> dict:
    vcs = [{"name": "hpc"}, {"name": "ml"}]
    nodes = [node("n1"), node("n2", borrowed_by="ml")]
    running = [run("home", "n1", preemption_class=1, checkpoint="auto"),
               run("guest", "n2", vcluster="ml", preemption_class=borrower_class, checkpoint="auto",
                   checkpoint_minutes=50)]
    return doc({"kind": "class_cost", "reclaim_rule": rule}, nodes, running, {"preemption_class": 5},
               vclusters=vcs)


def test_reclaim_comes_first_even_when_a_cheaper_victim_exists():
    out = decide(_reclaim_doc("any", 9))
    assert (victims(out), out["trigger"], out["nodes"]) == (["guest"], "reclaim", ["n2"])
    assert out["victims"][0]["reason"] == "reclaim"
    assert codes(out)["home"] == "NOT_NEEDED"


def test_reclaim_rule_lower_keeps_the_kind_rule():
    out = decide(_reclaim_doc("lower", 9))
    assert codes(out)["guest"] == "CLASS_NOT_LOWER"
    assert (victims(out), out["trigger"]) == (["home"], "priority")
    out = decide(_reclaim_doc("lower", 2))
    assert (victims(out), out["trigger"]) == (["guest"], "reclaim")


# -- priority -----------------------------------------------------------------------

def test_priority_threshold_and_scope():
    policy = {"kind": "priority", "preemptible_priority": 5, "victim_scope": "tenant"}
    running = [run("same", "n1", priority=20, tenant="t1"), run("high", "n2", priority=6, tenant="t1"),
               run("other", "n3", priority=1, tenant="t2"), run("ok", "n4", priority=5, tenant="t1")]
    out = decide(doc(policy, [node(f"n{i}") for i in range(1, 5)], running, {"priority": 20, "tenant": "t1"}))
    assert codes(out) == {"same": "PRIORITY_NOT_LOWER", "high": "ABOVE_PREEMPTIBLE_PRIORITY",
                          "other": "OUT_OF_SCOPE", "ok": "SELECTED"}


def test_priority_oldest_order_gives_back_later_started_first():
    # n1 holds two priority-3 allocations of 4 GPUs; the request needs only 4 GPUs.
    running = [run("early", {"n1": 4}, priority=3, started_at="2026-05-01T09:00:00Z"),
               run("late", {"n1": 4}, priority=3, started_at="2026-05-01T11:00:00Z")]
    newest = decide(doc({"kind": "priority"}, [node("n1")], running, {"priority": 9, "per_node": {"gpu": 4}}))
    oldest = decide(doc({"kind": "priority", "preemption_order": "oldest"}, [node("n1")], running,
                        {"priority": 9, "per_node": {"gpu": 4}}))
    assert victims(newest) == ["late"]
    assert victims(oldest) == ["early"]


def test_priority_multi_node_picks_best_nodes_in_turn():
    running = [run("a", "n1", priority=1), run("b", "n2", priority=5), run("c", "n3", priority=2)]
    out = decide(doc({"kind": "priority"}, [node("n1"), node("n2"), node("n3")], running,
                     {"priority": 9, "nodes": 2}))
    assert (victims(out), out["nodes"]) == (["a", "c"], ["n1", "n3"])


# -- queue --------------------------------------------------------------------------

QUEUES = [
    {"name": "urgent", "priority": 90, "preemptive": True, "preempts": [{"queue": "idle", "pref": 2}, "normal"]},
    {"name": "normal", "priority": 40},
    {"name": "idle", "priority": 50},
    {"name": "bulk", "priority": 10, "preemptable": True},
    {"name": "side", "priority": 10},
]


def test_queue_preempts_list_preference_and_preemptable_queues():
    running = [run("n", "n1", session_type="normal"), run("i", "n2", session_type="idle"),
               run("b", "n3", session_type="bulk"), run("s", "n4", session_type="side")]
    out = decide(doc({"kind": "queue"}, [node(f"n{i}") for i in range(1, 5)], running,
                     {"session_type": "urgent"}, session_types=QUEUES))
    # idle has preference 2 -> taken first even though normal's priority is lower
    assert victims(out) == ["i"]
    assert codes(out) == {"b": "NOT_NEEDED", "i": "SELECTED", "n": "NOT_NEEDED", "s": "QUEUE_NOT_PREEMPTABLE"}


def test_queue_exempt_jobtypes_and_run_time_limits():
    policy = {"kind": "queue", "preempt_jobtypes": ["backfill"], "no_preempt_run_minutes": 60,
              "no_preempt_finish_minutes": 10}
    running = [run("x", "n1", session_type="bulk", exclusive=True, backfill=True),
               run("y", "n2", session_type="bulk", backfill=True, walltime_minutes=600),
               run("r", "n3", session_type="bulk", walltime_minutes=600, started_at="2026-05-01T10:00:00Z"),
               run("f", "n4", session_type="bulk", walltime_minutes=58, started_at="2026-05-01T11:10:00Z")]
    out = decide(doc(policy, [node(f"n{i}") for i in range(1, 5)], running, {"session_type": "urgent"},
                     session_types=QUEUES))
    assert codes(out) == {"x": "EXEMPT_JOBTYPE", "y": "NO_PREEMPT_RUN_TIME", "r": "NO_PREEMPT_RUN_TIME",
                          "f": "NO_PREEMPT_FINISH_TIME"}
    assert out["code"] == "NO_FEASIBLE_SET"


def test_queue_least_loaded_node_first_then_least_run_time():
    running = [run("full", "n1", session_type="bulk", started_at="2026-05-01T11:50:00Z"),
               run("half", {"n2": 4}, session_type="bulk", started_at="2026-05-01T09:00:00Z")]
    req = {"session_type": "urgent", "per_node": {"gpu": 4}}
    nodes = [node("n1"), node("n2", gpu=12)]
    out = decide(doc({"kind": "queue"}, nodes, running, req, session_types=QUEUES))
    assert out["outcome"] == "fits"  # n2 has 8 free of 12
    req["per_node"] = {"gpu": 10}
    nodes = [node("n1", gpu=10), node("n2", gpu=10)]
    running[1]["placement"] = {"n2": {"gpu": 5}}  # n2 load 0.5 < n1 load 0.8
    running[0]["placement"] = {"n1": {"gpu": 8}}
    out = decide(doc({"kind": "queue"}, nodes, running, req, session_types=QUEUES))
    assert victims(out) == ["half"]
    out = decide(doc({"kind": "queue", "preempt_for": "least_run_time"}, nodes, running, req,
                     session_types=QUEUES))
    assert victims(out) == ["full"]


# -- rank ---------------------------------------------------------------------------

RANKED = [{"name": "hi", "rank": 100, "preemptive": True, "scope": "lower"},
          {"name": "lo", "rank": 10}, {"name": "peer", "rank": 100}]


def test_rank_gates_not_preemptive_and_not_under_allocated():
    tenants = [{"name": "me", "fair_share": 0.5}, {"name": "them", "fair_share": 0.1}]
    running = [run("t", "n1", tenant="them", session_type="lo")]
    out = decide(doc({"kind": "rank"}, [node("n1")], running, {"tenant": "me", "session_type": "lo"},
                     tenants=tenants, session_types=RANKED))
    assert out["code"] == "NOT_PREEMPTIVE"
    mine = [*running, run("m", "n2", tenant="me", session_type="lo")]  # me holds 0.5: not below
    out = decide(doc({"kind": "rank"}, [node("n1"), node("n2")], mine, {"tenant": "me", "session_type": "hi"},
                     tenants=tenants, session_types=RANKED))
    assert out["code"] == "NOT_UNDER_ALLOCATED"


def test_rank_scope_lower_excludes_equal_rank():
    tenants = [{"name": "me", "fair_share": 0.5}, {"name": "them", "fair_share": 0.1}]
    running = [run("eq", "n1", tenant="them", session_type="peer"),
               run("low", "n2", tenant="them", session_type="lo")]
    out = decide(doc({"kind": "rank"}, [node("n1"), node("n2")], running, {"tenant": "me", "session_type": "hi"},
                     tenants=tenants, session_types=RANKED))
    assert codes(out) == {"eq": "RANK_NOT_LOWER", "low": "SELECTED"}
    assert out["trigger"] == "fair_share"


# -- fair_share ---------------------------------------------------------------------

def _fs_doc(since: str, enable_aggressive: bool) -> dict:
    tenants = [{"name": "P", "fair_share": 0.5, "below_fair_share_since": since},
               {"name": "W", "fair_share": 0.5}]
    # W: w0 (0.25 of 32 GPUs... here 8/16 = 0.5 total -> within 0.5 x 1.0: aggressive only)
    running = [run("w0", {"n1": 2}, tenant="W", started_at="2026-05-01T06:00:00Z"),
               run("w1", {"n1": 6}, tenant="W", started_at="2026-05-01T07:00:00Z")]
    return doc({"kind": "fair_share", "enable_aggressive": enable_aggressive},
               [node("n1"), node("n2", state="down")], running, {"tenant": "P"}, tenants=tenants)


def test_fair_share_not_starving_before_timeout():
    out = decide(_fs_doc("2026-05-01T11:59:40Z", True))  # 20 s < 30 s
    assert (out["outcome"], out["code"]) == ("wait", "NOT_STARVING")


def test_fair_share_aggressive_only_band_needs_aggressive_starvation():
    # w0: running total 2/16 = 0.125 > 0.1 -> aggressive only; w1: 0.5 <= 0.5 -> aggressive only.
    out = decide(_fs_doc("2026-05-01T11:59:00Z", True))  # 60 s: starving, not aggressively (120 s)
    assert codes(out) == {"w0": "AGGRESSIVE_ONLY", "w1": "AGGRESSIVE_ONLY"}
    assert out["code"] == "NO_FEASIBLE_SET"
    out = decide(_fs_doc("2026-05-01T11:58:00Z", True))  # 120 s: aggressively starving
    assert (victims(out), out["trigger"]) == (["w0", "w1"], "fair_share")
    out = decide(_fs_doc("2026-05-01T11:00:00Z", False))
    assert out["code"] == "NO_FEASIBLE_SET"
