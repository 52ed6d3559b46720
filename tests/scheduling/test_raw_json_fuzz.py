"""Write endpoints fed arbitrary JSON, as a client could send it and the schema fuzzing does not:
any value for the fields they know, unknown keys, and text with NUL or lone surrogates (JSON's
``\\u0000`` and ``\\ud800`` escapes, which hypothesis's text leaves out by default). Whatever
comes, the answer is not a 5xx. Derandomized: CI runs the same examples each time."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

# Text of any code point, with the troublesome ones drawn often: NUL, a lone (low) surrogate, which
# no neighbour turns into a pair, a character outside the BMP, a combining one.
ODD = st.sampled_from(["\x00", "\udfff", "\U0001f600", "\u0301", "\\", '"'])
TEXT = st.lists(st.one_of(ODD, ODD, st.characters()), max_size=6).map("".join)
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8}, "command": ["sleep", "1"]}
# (who, method, url, a valid body): each example changes or adds a few fields of the valid body,
# so that what it sends reaches the checks past the first missing field.
ENDPOINTS = [
    ("alice", "post", "/api/v1/allocations/", JOB),
    ("alice", "post", "/api/v1/allocations/what-if/", JOB),
    ("alice", "post", "/api/v1/tokens/", {"name": "ci"}),
    ("ops", "post", "/api/v1/simulate/", {"policy": {"kind": "class_cost"}}),
    ("ops", "post", "/api/v1/overrides/pause/", {"resource_group": "rg-main", "reason": "maintenance"}),
    ("ops", "patch", "/api/v1/quotas/physics/", {"max_nodes": 2, "reason": "resize"}),
    ("ops", "put", "/api/v1/resource-groups/rg-main/policy/", {"policy": {"kind": "class_cost"}, "reason": "tune"}),
    ("ops", "post", "/api/v1/evaluations/", {"resource_group": "rg-main", "policy": {"kind": "fair_share"},
                                             "days": 1}),
]


def _body(valid: dict) -> st.SearchStrategy[str]:
    changes = st.dictionaries(st.sampled_from(sorted(valid)) | TEXT, VALUES, max_size=3)
    return changes.map(lambda change: json.dumps({**valid, **change}, ensure_ascii=True))


@pytest.mark.parametrize(("who", "method", "url", "valid"), ENDPOINTS, ids=[e[2] for e in ENDPOINTS])
def test_any_json_body_is_answered_without_a_server_error(client, django_user_model, operator, tenant_physics,
                                                          resource_group, two_nodes, who, method, url, valid):
    user = operator if who == "ops" else django_user_model.objects.get(username="alice")
    client.force_login(user)

    @settings(max_examples=100, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(body=_body(valid))
    def check(body: str) -> None:
        response = getattr(client, method)(url, body, content_type="application/json")
        assert response.status_code < 500, (body, response.content[:300])

    check()
