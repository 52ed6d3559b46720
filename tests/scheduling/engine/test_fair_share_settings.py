"""fair_share's YTsaurus settings: preemptive backoff, the non-preemptible usage threshold,
a vCluster's allow_aggressive_preemption, and the ordering the parser requires."""

from __future__ import annotations

import pytest

from scheduling.engine import InvalidDocument, parse_policy

from .helpers import codes, decide, doc, node, run, victims

STARVING_SINCE = "2026-05-01T11:50:00Z"  # 600 s before NOW: starving and aggressively starving


def _doc(policy: dict | None = None, vclusters: list | None = None, **extra) -> dict:
    # W holds both nodes (share 1.0) with fair share 0.25: already its oldest allocation (0.5 of
    # the group) is beyond 0.25 x preemption_threshold, so both are preemptible.
    tenants = [{"name": "P", "fair_share": 0.5, "below_fair_share_since": STARVING_SINCE},
               {"name": "W", "fair_share": 0.25}]
    running = [run("w0", "n1", tenant="W", started_at="2026-05-01T06:00:00Z"),
               run("w1", "n2", tenant="W", vcluster="gold", started_at="2026-05-01T07:00:00Z")]
    return doc({"kind": "fair_share", **(policy or {})}, [node("n1"), node("n2", vc="gold")], running,
               {"tenant": "P", "vcluster": None}, tenants=tenants,
               vclusters=vclusters or [{"name": "hpc"}, {"name": "gold"}], **extra)


def test_backoff_holds_a_starving_request_after_a_recent_preemptive_start():
    assert victims(decide(_doc())) == ["w1"]  # newest start first
    recent = decide(_doc(last_preemption_at="2026-05-01T11:59:57Z"))  # 3 s ago, backoff 5 s
    assert (recent["outcome"], recent["code"]) == ("wait", "PREEMPTION_BACKOFF")
    assert "waits a few seconds" in recent["explanation"]
    assert victims(decide(_doc(last_preemption_at="2026-05-01T11:59:55Z"))) == ["w1"]  # 5 s: over
    longer = decide(_doc({"preemptive_scheduling_backoff_s": 60}, last_preemption_at="2026-05-01T11:59:10Z"))
    assert longer["code"] == "PREEMPTION_BACKOFF"


def test_backoff_is_fair_share_only():
    d = _doc(last_preemption_at="2026-05-01T11:59:59Z")
    d["policy"] = {"kind": "priority"}
    d["pending"]["priority"] = 50
    assert decide(d)["outcome"] == "preempt"


def test_a_tenant_using_less_than_the_threshold_keeps_its_work():
    # W holds the whole group (share 1.0): a threshold above that protects all of it
    out = decide(_doc({"non_preemptible_usage_threshold": 1.0}))
    assert out["outcome"] == "preempt"  # 1.0 is not below 1.0
    d = _doc({"non_preemptible_usage_threshold": 1.0})
    d["nodes"].append(node("n3", vc="hpc"))
    d["running"].append(run("v0", "n3", tenant="V", started_at="2026-05-01T08:00:00Z"))
    d["tenants"].append({"name": "V", "fair_share": 0.0})
    out = decide(d)  # W now holds 2/3 of the group, V 1/3: both below 1.0
    assert codes(out) == {"w0": "WITHIN_FAIR_SHARE", "w1": "WITHIN_FAIR_SHARE", "v0": "WITHIN_FAIR_SHARE"}
    assert out["code"] == "NO_FEASIBLE_SET"


def test_aggressive_preemption_spares_a_vcluster_that_refuses_it():
    # W's fair share 1.0 puts both its allocations in the aggressive-only band
    policy = {"enable_aggressive": True, "aggressive_threshold": 0.2}
    d = _doc(policy)
    d["tenants"][1]["fair_share"] = 1.0
    assert victims(decide(d)) == ["w1"]  # aggressively starving: newest first
    d["vclusters"] = [{"name": "hpc"}, {"name": "gold", "allow_aggressive_preemption": False}]
    out = decide(d)
    assert codes(out)["w1"] == "AGGRESSIVE_ONLY" and victims(out) == ["w0"]


@pytest.mark.parametrize(("policy", "path"), [
    ({"kind": "fair_share", "starvation_timeout_s": 60, "aggressive_starvation_timeout_s": 30},
     "aggressive_starvation_timeout_s"),
    ({"kind": "fair_share", "preemptive_scheduling_backoff_s": -1}, "preemptive_scheduling_backoff_s"),
    ({"kind": "fair_share", "non_preemptible_usage_threshold": 1.5}, "non_preemptible_usage_threshold"),
])
def test_policy_errors_name_the_field(policy, path):
    with pytest.raises(InvalidDocument) as exc:
        parse_policy(policy)
    assert [p for p, _ in exc.value.errors] == [path]
