"""The audit log as operators read it: in the console and through the API, filtered, paged, each
entry with what it changed; tenants never."""

from __future__ import annotations

import pytest

from scheduling.models import PolicyChange

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def two_changes(ops, resource_group):
    """The operator edits rg-main's policy, then pauses the group, both through the API."""
    done = ops.put("/api/v1/resource-groups/rg-main/policy/",
                   {"policy": {"kind": "priority", "max_victims": 2}, "reason": "nightly runs"},
                   content_type="application/json")
    assert done.status_code == 200, done.content
    done = ops.post("/api/v1/overrides/pause/", {"resource_group": "rg-main", "reason": "maintenance"},
                    content_type="application/json")
    assert done.status_code == 200, done.content


def test_entries_newest_first_with_what_each_changed(ops, two_changes):
    body = ops.get("/api/v1/audit/").json()
    entries = body["results"]
    assert [(e["action"], e["actor"], e["target_type"], e["target"], e["reason"]) for e in entries] == [
        ("pause", "op", "scheduling.resourcegroup", "rg-main", "maintenance"),
        ("edit", "op", "scheduling.resourcegroup", "rg-main", "nightly runs")]
    assert entries[0]["changes"] == [{"field": "paused", "before": False, "after": True}]
    assert entries[1]["changes"] == [{"field": "policy.kind", "before": "class_cost", "after": "priority"},
                                     {"field": "policy.max_victims", "before": None, "after": 2}]
    assert entries[1]["before"]["policy"] == {"kind": "class_cost"}
    assert ops.get(f"/api/v1/audit/{entries[1]['id']}/").json() == entries[1]


def test_filters_narrow_the_log(ops, two_changes, resource_group):
    def actions(query: str) -> list[str]:
        response = ops.get(f"/api/v1/audit/?{query}")
        assert response.status_code == 200, response.content
        return [e["action"] for e in response.json()["results"]]

    assert actions("action=edit") == ["edit"]
    assert actions("actor=op") == ["pause", "edit"]
    assert actions("actor=system") == [] and actions("actor=nobody") == []
    assert actions("target_type=scheduling.resourcegroup&action=pause") == ["pause"]
    assert actions(f"target={resource_group.pk}") == ["pause", "edit"]
    assert actions("target=0") == []


def test_the_log_is_paged_by_cursor_newest_first(ops, resource_group):
    PolicyChange.objects.bulk_create([
        PolicyChange(action="edit", target_type="scheduling.resourcegroup", target_id=str(resource_group.pk),
                     target_repr="rg-main", reason=f"step {i}") for i in range(60)])
    seen, url = [], "/api/v1/audit/"
    while url:
        body = ops.get(url).json()
        seen += [e["reason"] for e in body["results"]]
        url = body["next"]
    assert seen == [f"step {i}" for i in reversed(range(60))]


def test_the_console_page_filters_and_shows_changes(ops, two_changes):
    page = ops.get("/ops/audit/?action=edit&actor=op").content.decode()
    assert "nightly runs" in page and "maintenance" not in page
    assert "<code>policy.max_victims</code> - → 2" in page
    assert "<code>policy.kind</code> class_cost → priority" in page
    page = ops.get("/ops/audit/?actor=someone-else").content.decode()
    assert "No changes match these filters." in page


def test_the_console_page_keeps_its_filters_on_older_pages(ops, resource_group):
    PolicyChange.objects.bulk_create([
        PolicyChange(action=("edit" if i % 2 else "pause"), target_type="scheduling.resourcegroup",
                     target_id=str(resource_group.pk), target_repr="rg-main", reason=f"step {i}")
        for i in range(120)])
    first = ops.get("/ops/audit/?action=edit").content.decode()
    older = first.split('<a href="?before=')[1].split('"')[0]
    assert older.endswith("&amp;action=edit")
    second = ops.get("/ops/audit/?before=" + older.replace("&amp;", "&")).content.decode()
    assert second.count('class="audit-row"') == 10 and "<td>pause</td>" not in second


def test_tenants_cannot_read_the_log(api_for, two_changes, tenant_physics):
    client = api_for("alice")
    assert client.get("/api/v1/audit/").status_code == 403
    entry = PolicyChange.objects.first()
    assert client.get(f"/api/v1/audit/{entry.pk}/").status_code == 403
