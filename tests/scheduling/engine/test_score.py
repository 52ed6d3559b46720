"""The Lattice queue score: each term, their weighted sum and the budget penalty, checked against
values worked out by hand here (not by the code under test)."""

from __future__ import annotations

import math

import pytest

from scheduling.engine import score as es

# The HPC batch weights, written out (w1..w9).
HPC = {"w1": 0.25, "w2": 0.20, "w3": 0.15, "w4": 0.10, "w5": 0.10, "w6": 0.10, "w7": 0.05, "w8": 0.05, "w9": 0.0}


@pytest.mark.parametrize(("used", "expected"), [
    (0.0, 1.0),
    (0.8, 1.0),
    # halfway down the cosine: 0.05 + 0.95 * (1 + cos(pi/2)) / 2
    (1.0, 0.525),
    (1.2, 0.05),
    (1.5, 0.05),
    # a quarter of the way: 0.05 + 0.95 * (1 + cos(pi/4)) / 2 = 0.05 + 0.95 * 0.8535534
    (0.9, 0.8608757),
    (None, 1.0),
])
def test_budget_penalty_curve(used, expected):
    assert es.budget_penalty(used) == pytest.approx(expected, abs=1e-6)


def test_budget_penalty_falls_steadily_between_80_and_120_percent():
    points = [es.budget_penalty(0.8 + i * 0.01) for i in range(41)]
    assert all(a > b for a, b in zip(points, points[1:], strict=False))


def test_budget_used_of_a_zero_budget():
    assert es.budget_used(0.0, 0.0) == 0.0
    assert es.budget_used(0.5, 0.0) == math.inf
    assert es.budget_penalty(es.budget_used(0.5, 0.0)) == 0.05
    assert es.budget_used(30.0, 40.0) == 0.75
    assert es.budget_used(30.0, None) is None


def test_terms_by_hand():
    assert es.f_priority(6) == 0.6
    assert es.f_wait(0) == 0.0
    assert es.f_wait(3600) == 0.5
    assert es.f_wait(3 * 3600) == 0.75
    assert es.f_wait(-5) == 0.0  # a clock behind the submission never goes negative
    assert es.f_fair_share(0.5, 0.2) == pytest.approx(0.6)
    assert es.f_fair_share(0.5, 0.7) == 0.0
    assert es.f_fair_share(0.0, 0.3) == 0.5  # no fair share: not known
    assert es.f_checkpoint("auto", 10, 30) == 0.5
    assert es.f_checkpoint("auto", 0, 30) == 1.0
    assert es.f_checkpoint("manual", 1, 30) == 0.25  # the policy's timeout, 30 min: 1 / (1 + 3)
    assert es.f_checkpoint("none", 1, 30) == 0.0
    assert es.f_backlog(8, 32) == 0.25
    assert es.f_backlog(64, 32) == 1.0
    assert es.f_backlog(8, 0) == 0.5


def test_topology_and_conformance_from_labels():
    assert es.f_topology(2, [2, 2, 1]) == 1.0  # one switch holds both
    assert es.f_topology(3, [2, 2, 1]) == 0.5  # two switches at least
    assert es.f_topology(6, [2, 2, 1]) == 0.0  # not enough nodes carry the label
    assert es.f_topology(2, None) == 0.5 and es.f_topology(2, []) == 0.5
    assert es.f_conformance(4, 2) == 0.5
    assert es.f_conformance(2, 5) == 1.0
    assert es.f_conformance(2, None) == 0.5


def test_weighted_sum_times_the_penalty():
    terms = {"f1": 0.6, "f2": 0.5, "f3": 0.6, "f6": 0.25, "f8": 0.5}  # f4, f5, f7, f9 unknown: 0.5
    # .25*.6 + .2*.5 + .15*.6 + .1*.5 + .1*.5 + .1*.25 + .05*.5 + .05*.5 + 0*.5
    base = 0.15 + 0.10 + 0.09 + 0.05 + 0.05 + 0.025 + 0.025 + 0.025
    assert base == pytest.approx(0.515)
    scored = es.combine(HPC, terms, used=None)
    assert (scored.base, scored.penalty, scored.total) == (pytest.approx(0.515), 1.0, pytest.approx(0.515))
    over = es.combine(HPC, terms, used=1.0)
    assert over.total == pytest.approx(0.515 * 0.525)
    assert es.combine(HPC, terms, used=1.5).total == pytest.approx(0.515 * 0.05)
    assert over.terms["f5"] == 0.5 and over.weights["w9"] == 0.0


def test_stored_score_reads_as_named_terms():
    stored = es.combine(HPC, {"f1": 0.6, "f2": 0.5}, used=0.9).to_dict()
    shown = es.explain_score(stored)
    assert shown is not None
    by_term = {t["term"]: t for t in shown["terms"]}
    assert by_term["f1"]["name"] == "priority class" and by_term["f1"]["part"] == pytest.approx(0.15)
    assert by_term["f8"]["name"] == "checkpoint efficiency"
    assert "90% of this month's GPU-hours budget used" in shown["summary"]
    assert "priority class 0.60 x 0.25" in shown["summary"]
    assert es.explain_score(None) is None
