"""Hostile input answers 400 (or 413) with a JSON body naming what was wrong, never a 500 or an
HTML page: NUL characters (PostgreSQL refuses them in text), unknown fields, bad filter values,
an over-limit body."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation

pytestmark = pytest.mark.django_db

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
       "preemption_class": 3, "checkpoint": "auto", "command": ["sleep", "60"]}


@pytest.fixture
def alice(api_for, tenant_physics, two_nodes):
    return api_for("alice")


@pytest.fixture
def ops(client, operator, tenant_physics, two_nodes):
    client.force_login(operator)
    return client


@pytest.mark.postgres
@pytest.mark.parametrize(("path", "over", "field"), [
    ("/api/v1/allocations/", {"resource_group": "rg\x00main"}, "resource_group"),
    ("/api/v1/allocations/what-if/", {"resource_group": "rg\x00main"}, "resource_group"),
    ("/api/v1/allocations/", {"env": {"A\x00B": "1"}}, "env"),
    ("/api/v1/allocations/", {"constraints": {"labels": {"s\x00": "x"}}}, "constraints"),
])
def test_a_nul_in_a_submission_is_a_field_error(alice, path, over, field):
    response = alice.post(path, {**JOB, **over}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Allocation.objects.exists()


@pytest.mark.parametrize("name", ["two\nlines", "a\rb", "tab\there", "\x1b]0;title\x07", "bidi\u202eflip", "z\u200bw",
                                  "line\u2028separator", "n\x85el"])
def test_a_job_name_with_control_or_format_characters_is_a_field_error(alice, name):
    response = alice.post("/api/v1/allocations/", {**JOB, "name": name}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "printable text on one line" in response.json()["name"][0]
    assert not Allocation.objects.exists()
    fine = alice.post("/api/v1/allocations/", {**JOB, "name": "résumé 训练 #1 (ok)"}, content_type="application/json")
    assert fine.status_code == 201 and fine.json()["name"] == "résumé 训练 #1 (ok)"


@pytest.mark.parametrize("name", ["学習\u3000ジョブ", "no\u00a0break", "private\ue000use"])
def test_a_job_name_with_spaces_other_than_ascii_s_is_taken(alice, name):
    """A CJK ideographic space or a no-break space is text on one line, not a control or format
    character: the name is kept as written."""
    made = alice.post("/api/v1/allocations/", {**JOB, "name": name}, content_type="application/json")
    assert made.status_code == 201, made.content
    assert made.json()["name"] == name


@pytest.mark.postgres
@pytest.mark.parametrize(("who", "url", "name"), [
    ("alice", "/api/v1/allocations/?state=run%00ning", "state"),
    ("alice", "/api/v1/allocations/?resource_group=rg%00", "resource_group"),
    ("alice", "/api/v1/preemptions/?resource_group=rg%00", "resource_group"),
    ("ops", "/api/v1/audit/?actor=op%00", "actor"),
    ("ops", "/api/v1/audit/?target=1%00", "target"),
    ("ops", "/api/v1/nodes/gpu%00a/", "path"),
    ("ops", "/api/v1/quotas/phys%00ics/", "path"),
    ("ops", "/api/v1/tenants/phys%00ics/", "path"),
    ("ops", "/api/v1/resource-groups/rg%00/", "path"),
])
def test_a_nul_in_a_lookup_is_a_400_naming_it(request, who, url, name):
    response = request.getfixturevalue(who).get(url)
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert name in response.json()


@pytest.mark.parametrize(("who", "url", "name"), [
    ("alice", "/api/v1/allocations/?state=running&state=pending", "state"),
    ("alice", "/api/v1/preemptions/?resource_group=rg-main&resource_group=other", "resource_group"),
    ("ops", "/api/v1/audit/?actor=op&target=1&actor=other", "actor"),
])
def test_a_query_parameter_of_the_api_given_twice_is_a_400_naming_it(request, who, url, name):
    """Filters and cursors take one value each: the last copy read silently answered another question."""
    response = request.getfixturevalue(who).get(url)
    assert response.status_code == 400, response.content
    assert response.json() == {name: ["given more than once: give it once"]}
    once = request.getfixturevalue(who).get(url.split("&")[0])
    assert once.status_code == 200, once.content


@pytest.mark.postgres
def test_a_nul_in_an_operator_write_is_a_field_error(ops):
    response = ops.post("/api/v1/overrides/pause/", {"resource_group": "rg\x00", "reason": "r"},
                        content_type="application/json")
    assert response.status_code == 400
    assert "resource_group" in response.json()
    response = ops.patch("/api/v1/quotas/physics/", {"max_nodes": 2, "reason": "r\x00"},
                         content_type="application/json")
    assert response.status_code == 400
    assert "reason" in response.json()


@pytest.mark.postgres
@pytest.mark.parametrize(("body", "field"), [
    ('"\\ud800": 1', "\\ud800"),  # an unknown field's name, which the answer names
    ('"env": {"\\ud800": "x"}', "env"),
    ('"per_node": {"gpu": 8, "\\udfff": 1}', "per_node"),
    ('"env": {"A": "x\\ud800"}', "env"),
])
def test_a_lone_surrogate_anywhere_in_a_submission_is_a_field_error(alice, body, field):
    """JSON's \\ud800 escape decodes to no character: UTF-8 cannot carry it, so an answer naming
    it could not be written (a 500), nor could the database store it."""
    text = '{"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "command": ["sleep"], ' + body + "}"
    if '"per_node"' not in body:
        text = text.replace('"nodes": 1,', '"nodes": 1, "per_node": {"gpu": 8},')
    response = alice.post("/api/v1/allocations/", text, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()[field] == ["must not contain a lone surrogate (\\ud800 to \\udfff): it is no character"]
    assert not Allocation.objects.exists()


def test_an_over_limit_body_is_refused_in_json(alice, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = alice.post("/api/v1/allocations/", {**JOB, "name": "x" * 2000}, content_type="application/json")
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert "detail" in response.json()


@pytest.mark.postgres
def test_a_nul_in_a_form_post_is_a_field_error(ops):
    response = ops.post("/api/v1/overrides/pause/", {"resource_group": "rg\x00", "reason": "r"})
    assert response.status_code == 400
    assert "resource_group" in response.json()


def test_django_s_own_errors_under_the_api_are_json(alice, client):
    missing = alice.get("/api/v1/no-such-thing/")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not found."}
    page = client.get("/no-such-page/")
    assert page.status_code == 404 and not page["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/api/v1/arrays//", "/api/v1/no-such-thing/", "/api/nothing"])
def test_an_unknown_api_url_is_json_in_development_too(alice, settings, path):
    settings.DEBUG = True  # Django's own debug page answers instead of handler404
    missing = alice.get(path)
    assert missing.status_code == 404 and missing.json() == {"detail": "Not found."}


OPERATOR_WRITES = [
    ("put", "/api/v1/resource-groups/rg-main/policy/", {"policy": {"kind": "priority"}, "reason": "r"}),
    ("post", "/api/v1/resource-groups/rg-main/preview/", {"policy": {"kind": "priority"}}),
    ("post", "/api/v1/vclusters/", {"resource_group": "rg-main", "name": "ml", "reason": "r"}),
    ("patch", "/api/v1/vclusters/{vc}/", {"max_borrow_pct": 0.5, "reason": "r"}),
    ("post", "/api/v1/session-types/", {"resource_group": "rg-main", "name": "batch", "reason": "r"}),
    ("patch", "/api/v1/quotas/physics/", {"max_nodes": 1, "reason": "r"}),
    ("post", "/api/v1/overrides/pause/", {"resource_group": "rg-main", "reason": "r"}),
    ("post", "/api/v1/overrides/resume/", {"resource_group": "rg-main", "reason": "r"}),
    ("post", "/api/v1/overrides/protect/", {"allocation": "{alloc}", "until": "2030-01-01T00:00:00Z",
                                            "reason": "r"}),
    ("post", "/api/v1/overrides/force-preempt/", {"allocation": "{alloc}", "reason": "r"}),
    ("post", "/api/v1/nodes/gpu-a/drain/", {"reason": "r"}),
    ("post", "/api/v1/nodes/gpu-a/undrain/", {"reason": "r"}),
    ("post", "/api/v1/nodes/gpu-a/agent-token/", {"reason": "r"}),
]


@pytest.mark.parametrize(("method", "url", "body"), OPERATOR_WRITES)
def test_an_unknown_field_in_an_operator_write_is_refused_by_name(ops, make_allocation, vcluster_hpc, method,
                                                                  url, body):
    from scheduling.models import PolicyChange

    alloc = make_allocation(state="running")
    fill = {"{alloc}": alloc.pk, "{vc}": vcluster_hpc.pk}
    url = url.format(**{k.strip("{}"): v for k, v in fill.items()})
    body = {k: fill.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    response = getattr(ops, method)(url, {**body, "reasn": "typo"}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["reasn"]
    assert not PolicyChange.objects.exists()


@pytest.mark.parametrize("path", ["/api/v1/allocations/", "/api/v1/allocations/what-if/"])
def test_an_unknown_field_in_a_submission_is_refused_by_name(alice, path):
    response = alice.post(path, {**JOB, "preemtion_class": 9}, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"preemtion_class": ["unknown field"]}
    response = alice.post(path, {**JOB, "constraints": {"same": "switch", "lables": {}}},
                          content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"constraints": {"lables": ["unknown field"]}}
    assert not Allocation.objects.exists()


@pytest.mark.parametrize(("who", "url", "name"), [
    ("alice", "/api/v1/allocations/?state=bogus", "state"),
    ("alice", "/api/v1/allocations/?state=running,bogus", "state"),
    ("alice", "/api/v1/allocations/?resource_group=nope", "resource_group"),
    ("alice", "/api/v1/preemptions/?resource_group=nope", "resource_group"),
    ("ops", "/api/v1/audit/?action=bogus", "action"),
    ("ops", "/api/v1/evaluations/?resource_group=nope", "resource_group"),
    ("ops", "/api/v1/memberships/?tenant=nope", "tenant"),
    ("ops", "/api/v1/run-as/members/?tenant=nope", "tenant"),
])
def test_a_bad_filter_value_is_a_400_naming_the_filter(request, who, url, name):
    response = request.getfixturevalue(who).get(url)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [name]


def test_a_bad_held_value_is_a_400_naming_the_filter(alice, make_allocation):
    make_allocation(state="pending")
    response = alice.get("/api/v1/allocations/?held=maybe")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["held"]


def test_the_held_filter_filters(alice, make_allocation):
    held, free = make_allocation(state="pending", held=True), make_allocation(state="pending")
    assert [a["id"] for a in alice.get("/api/v1/allocations/?held=true").json()["results"]] == [held.pk]
    assert [a["id"] for a in alice.get("/api/v1/allocations/?held=false").json()["results"]] == [free.pk]


def test_good_filter_values_still_filter(alice, make_allocation):
    running, pending = make_allocation(state="running"), make_allocation(state="pending")
    make_allocation(state="completed")
    listed = alice.get("/api/v1/allocations/?state=running,pending&resource_group=rg-main").json()["results"]
    assert sorted(a["id"] for a in listed) == sorted([running.pk, pending.pk])


@pytest.mark.parametrize(("who", "url"), [("alice", "/api/v1/allocations/"), ("alice", "/api/v1/preemptions/"),
                                          ("ops", "/api/v1/nodes/"), ("ops", "/api/v1/audit/"),
                                          ("alice", "/api/v1/tokens/")])
def test_a_cursor_this_list_never_gave_is_a_400_naming_it(request, who, url):
    response = request.getfixturevalue(who).get(url + "?cursor=garbage")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["cursor"]


@pytest.mark.parametrize("position", ["abc", "-1", "1.5", "99999999999999999999", "\u0661", "1" * 5000])
@pytest.mark.parametrize(("who", "url"), [("alice", "/api/v1/allocations/"), ("alice", "/api/v1/preemptions/"),
                                          ("ops", "/api/v1/preemptions/"), ("ops", "/api/v1/audit/")])
def test_a_cursor_in_the_right_form_with_a_position_no_row_has_is_a_400(request, who, url, position):
    """Well-formed (base64 of the query string DRF writes) but not a row id where the list is by
    id: refused as any cursor it never gave, not a 500 from the database."""
    import base64
    from urllib.parse import urlencode

    cursor = base64.b64encode(urlencode({"p": position}).encode()).decode()
    response = request.getfixturevalue(who).get(url, {"cursor": cursor})
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["cursor"]


def test_a_cursor_the_list_gave_still_pages(alice, make_allocation, settings):
    for _ in range(51):
        make_allocation(state="pending")
    first = alice.get("/api/v1/allocations/").json()
    second = alice.get(first["next"])
    assert second.status_code == 200 and len(second.json()["results"]) == 1


@pytest.mark.parametrize(("over", "field"), [
    ({"depends_on": [{"type": "afterok", "job": 2**64}]}, "depends_on"),
    ({"array": "0-3%" + "9" * 20}, "array"),
    ({"array": "0-3%2147483648"}, "array"),  # past PostgreSQL's integer column
])
@pytest.mark.parametrize("path", ["/api/v1/allocations/", "/api/v1/allocations/what-if/"])
def test_a_number_past_what_the_database_holds_is_a_field_error(alice, path, over, field):
    """A job id or an array throttle too large for its column was sent to the database (a 500)."""
    response = alice.post(path, {**JOB, **over}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert not Allocation.objects.exists()


@pytest.mark.parametrize("value", ["99999999999999999999", "1.5"])
def test_a_bad_array_filter_is_a_400_naming_it(alice, make_allocation, value):
    make_allocation(state="pending")
    response = alice.get("/api/v1/allocations/", {"array": value})
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["array"]


def test_ended_work_is_not_released_as_it_is_not_held(alice, make_allocation):
    """Release answers 409 unless pending, as hold does: a cancelled job still marked held was
    'released', with an audit entry and a line in its history."""
    from scheduling.models import AllocationEvent, PolicyChange

    alloc = make_allocation(state="cancelled", held=True, held_by="user")
    response = alice.post(f"/api/v1/allocations/{alloc.pk}/release/", {}, content_type="application/json")
    assert response.status_code == 409, response.content
    alloc.refresh_from_db()
    assert alloc.held
    assert not PolicyChange.objects.exists() and not AllocationEvent.objects.exists()


@pytest.mark.parametrize("until", ["0001-01-01T00:00:00Z", "0001-01-10T00:00:00Z"])
def test_a_usage_window_before_the_calendar_is_a_400_naming_until(alice, until):
    """The default window is the 30 days before ``until``: near year 1 that date does not exist (a 500)."""
    response = alice.get("/api/v1/usage/", {"until": until})
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["until"]


@pytest.mark.parametrize("position", ["\x00", "gpu\x00a"])
def test_a_nul_in_a_by_name_cursor_is_a_400_naming_it(ops, position):
    """The nodes list pages by name: a NUL in its cursor's position reached PostgreSQL (a 500)."""
    import base64
    from urllib.parse import urlencode

    cursor = base64.b64encode(urlencode({"p": position}).encode()).decode()
    response = ops.get("/api/v1/nodes/", {"cursor": cursor})
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["cursor"]


@pytest.mark.parametrize("labels", [
    {f"k{i}": "v" for i in range(65)},  # too many
    {"k" * 129: "v"},  # a name too long
    {"": "v"},
])
def test_huge_label_constraints_are_a_field_error(alice, labels):
    response = alice.post("/api/v1/allocations/", {**JOB, "constraints": {"labels": labels}},
                          content_type="application/json")
    assert response.status_code == 400, response.content
    assert "labels" in response.json()["constraints"]
    assert not Allocation.objects.exists()


@pytest.mark.parametrize("labels", [{"rack": {"row": "1"}}, {f"k{i}": "v" for i in range(65)}, ["a"],
                                    [], "", None])  # empty values skip a field's validators
def test_a_node_s_labels_must_be_a_bounded_flat_mapping(two_nodes, labels):
    from django.core.exceptions import ValidationError

    node = two_nodes[0]
    node.labels = labels
    with pytest.raises(ValidationError) as refused:
        node.full_clean()  # what the admin runs before it saves
    assert "labels" in refused.value.message_dict


@pytest.mark.parametrize("depth", [900, 5000])
def test_a_body_nested_past_what_can_be_walked_or_decoded_is_a_400(alice, depth):
    # 900 levels decode, and a recursive walk of the texts ran out of stack; 5,000 do not decode.
    body = '{"env": ' + "[" * depth + "]" * depth + "}"
    response = alice.post("/api/v1/allocations/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:200]
    assert not Allocation.objects.exists()


@pytest.mark.parametrize("path", ["/api/v1/overrides/protect/", "/api/v1/overrides/force-preempt/"])
@pytest.mark.parametrize("allocation", ["{pk}.5", "{pk}.0", "1e400", "-1e400", "true", "[{pk}]", "{{\"id\": {pk}}}"])
def test_an_allocation_that_is_not_an_integer_id_is_a_field_error_and_changes_nothing(ops, make_allocation, path,
                                                                                      allocation):
    """``1e400`` (a float past any) was a 500, and a fraction named the allocation it rounds down
    to: ``8.9`` protected or preempted allocation 8, audited as the operator's."""
    from scheduling.models import PolicyChange

    target = make_allocation(state="running", node_count=1, per_node_gpu=8)
    until = '"until": "2999-01-01T00:00:00Z", ' if path.endswith("/protect/") else ""
    body = f'{{"reason": "r", {until}"allocation": {allocation.format(pk=target.pk)}}}'
    response = ops.post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["allocation"]
    target.refresh_from_db()
    assert (target.state, target.protected_until) == ("running", None)
    assert not PolicyChange.objects.exists()


@pytest.mark.parametrize("allocation", ["{pk}", "\"{pk}\""])
def test_an_allocation_id_as_a_number_or_its_digits_is_taken(ops, make_allocation, allocation):
    target = make_allocation(state="running", node_count=1, per_node_gpu=8)
    body = f'{{"reason": "r", "until": "2999-01-01T00:00:00Z", "allocation": {allocation.format(pk=target.pk)}}}'
    response = ops.post("/api/v1/overrides/protect/", body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["allocation"] == target.pk


@pytest.mark.parametrize(("body", "key"), [
    ('{"nodes": 1, "nodes": 2}', "nodes"),
    ('{"per_node": {"gpu": 1, "gpu": 8}}', "gpu"),
    ('{"env": {"A": "1", "B": "2", "A": "3"}}', "A"),
])
@pytest.mark.parametrize("path", ["/api/v1/allocations/", "/api/v1/allocations/what-if/"])
def test_a_key_given_twice_in_one_object_is_a_400_naming_it(alice, path, body, key):
    """JSON keeps a repeated key's last value without a word, so the request meant whatever its
    last copy said while anything that read the first (a proxy, a log, a reviewer) saw another."""
    import json

    fields = json.dumps({k: v for k, v in JOB.items() if k not in ("nodes", "per_node")})
    response = alice.post(path, fields[:-1] + ", " + body[1:], content_type="application/json")
    assert response.status_code == 400, response.content
    assert f"the key '{key}' is given more than once" in response.json()["detail"]
    assert not Allocation.objects.exists()


def test_a_body_whose_keys_are_each_given_once_is_read_as_before(alice):
    response = alice.post("/api/v1/allocations/", {**JOB, "env": {"A": "1"}}, content_type="application/json")
    assert response.status_code == 201, response.content
    assert Allocation.objects.get().env == {"A": "1"}


@pytest.mark.parametrize("env", [{"A=B": "1"}, {"": "1"}, {"=": "1", "B": "2"}])
def test_an_env_name_no_process_can_be_given_is_a_field_error(alice, env):
    """A name with '=' (or none at all) cannot be put in a process's environment: the agent could
    never start the work."""
    for path in ("/api/v1/allocations/", "/api/v1/allocations/what-if/"):
        response = alice.post(path, {**JOB, "env": env}, content_type="application/json")
        assert response.status_code == 400, response.content
        assert "not a variable name" in response.json()["env"][0]
    assert not Allocation.objects.exists()
