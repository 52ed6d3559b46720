"""Work on a borrowed node carries an implicit preemption risk (class_cost's ``borrowed_risk``):
its checkpoint term is discounted. Off (0) by default, so every other decision is unchanged."""

from __future__ import annotations

import pytest

from scheduling.engine import InvalidDocument, parse_policy

from .helpers import decide, doc, node, run, victims


def _doc(risk: float | None) -> dict:
    policy = {"kind": "class_cost"} if risk is None else {"kind": "class_cost", "borrowed_risk": risk}
    nodes = [node("n1"), node("n2", borrowed_by="ml")]
    # Neither is reclaimed (the request belongs to no vCluster), so only their costs decide.
    running = [run("home", "n1", preemption_class=1, checkpoint="auto", checkpoint_minutes=10),
               run("guest", "n2", vcluster="ml", preemption_class=1, checkpoint="auto", checkpoint_minutes=16)]
    return doc(policy, nodes, running, {"preemption_class": 5, "vcluster": None},
               vclusters=[{"name": "hpc"}, {"name": "ml"}])


def _costs(out: dict) -> dict[str, float]:
    return {c["id"]: c["cost"] for c in out["candidates"] if "cost" in c}


def test_without_the_risk_the_cheaper_home_work_is_preempted():
    for risk in (None, 0.0):
        out = decide(_doc(risk))
        assert victims(out) == ["home"]
        assert _costs(out)["guest"] == pytest.approx(16.0)


def test_the_risk_discounts_work_on_a_borrowed_node():
    out = decide(_doc(0.5))
    assert victims(out) == ["guest"]
    assert out["trigger"] != "reclaim"
    assert _costs(out) == {"home": pytest.approx(10.0), "guest": pytest.approx(8.0)}  # 16 x (1 - 0.5)


def test_the_risk_leaves_the_walltime_term_whole():
    d = _doc(1.0)
    for r in d["running"]:
        r["walltime_minutes"] = 70  # started an hour before now: f = 60/70, term 85.71...
    out = decide(d)
    assert _costs(out)["guest"] == pytest.approx(60 / 70 * 100)
    assert _costs(out)["home"] == pytest.approx(10 + 60 / 70 * 100)


def test_borrowed_risk_is_a_share():
    assert parse_policy({"kind": "class_cost"}).borrowed_risk == 0.0
    with pytest.raises(InvalidDocument) as err:
        parse_policy({"kind": "class_cost", "borrowed_risk": 1.5})
    assert err.value.errors[0][0] == "borrowed_risk"
