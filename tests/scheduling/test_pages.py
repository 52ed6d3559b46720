"""Console and portal pages: who may see what, the policy editor's preview and audit, overrides."""

from __future__ import annotations

import html
import json
import re

import pytest

from scheduling.models import PolicyChange, ResourceGroup
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db

POLICY = {"policy_kind": "class_cost", "policy_enabled": "on", "policy_mode": "suspend", "policy_max_victims": "3",
          "policy_near_completion_minutes": "5", "policy_min_runtime_minutes": "0", "policy_reclaim_rule": "any",
          "policy_checkpoint_timeout_minutes": "10", "policy_max_deferral_minutes": "5", "policy_victim_scope": "resource_group",
          "policy_preemption_order": "newest", "policy_tolerance": "0.8", "policy_starvation_timeout_s": "30",
          "policy_aggressive_starvation_timeout_s": "120", "policy_preemption_threshold": "1.0",
          "policy_aggressive_threshold": "0.2",
          "policy_preemptive_scheduling_backoff_s": "5", "policy_non_preemptible_usage_threshold": "0"}


def test_tenant_members_cannot_open_the_console(client, tenant_physics, resource_group, django_user_model):
    client.force_login(django_user_model.objects.get(username="alice"))
    for url in ("/ops/", "/ops/audit/", f"/ops/groups/{resource_group.name}/",
                f"/ops/groups/{resource_group.name}/policy/"):
        assert client.get(url).status_code == 403, url


def test_console_pages_render_for_operators(client, operator, resource_group, two_nodes, make_allocation,
                                            vcluster_hpc):
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                    vcluster=vcluster_hpc)
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                    vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=8, checkpoint="auto",
                           vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    decision = high.decisions.get()
    client.force_login(operator)
    group_page = client.get(f"/ops/groups/{resource_group.name}/").content.decode()
    assert "gpu-a" in group_page
    victim = decision.victims[0]["id"]
    assert f'<a href="/jobs/{victim}/">#{victim}</a>' in group_page  # on its node
    assert f'<a href="/jobs/{high.pk}/">#{high.pk}</a>' in group_page  # in the queue
    page = client.get(f"/ops/decisions/{decision.pk}/").content.decode()
    assert "PREEMPT" in page and "SELECTED" in page
    # Each allocation named links to its page; the policy reads as the JSON it is stored as.
    assert f'<a href="/jobs/{victim}/">#{victim}</a>' in page
    assert f'<a href="/jobs/{high.pk}/">#{high.pk}</a>' in page
    shown = re.search(r"<h2>Policy as it was</h2><pre>(.*?)</pre>", page, re.S)
    assert shown is not None and json.loads(html.unescape(shown.group(1))) == decision.policy_snapshot
    assert f"decision {decision.pk}" in client.get("/ops/").content.decode()


def test_policy_preview_changes_nothing_and_save_is_audited(client, operator, resource_group, two_nodes,
                                                             make_allocation, vcluster_hpc):
    client.force_login(operator)
    url = f"/ops/groups/{resource_group.name}/policy/"
    preview = client.post(url, {**POLICY, "policy_max_victims": "1", "reason": "fewer victims", "action": "preview"})
    assert preview.status_code == 200 and b"Preview on the current state" in preview.content
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy == {"kind": "class_cost"}
    missing_reason = client.post(url, {**POLICY, "action": "save"})
    assert missing_reason.status_code == 200 and not PolicyChange.objects.exists()
    saved = client.post(url, {**POLICY, "policy_max_victims": "1", "reason": "fewer victims", "action": "save"})
    assert saved.status_code == 302
    assert ResourceGroup.objects.get(pk=resource_group.pk).policy["max_victims"] == 1
    change = PolicyChange.objects.get()
    assert (change.action, change.reason, change.actor) == ("edit", "fewer victims", operator)
    assert "fewer victims" in client.get("/ops/audit/?action=edit").content.decode()


def test_overrides_pause_protect_and_force_preempt_are_audited(client, operator, resource_group, two_nodes,
                                                               make_allocation, vcluster_hpc):
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, checkpoint="auto", vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    client.force_login(operator)
    assert client.post(f"/ops/groups/{resource_group.name}/pause/", {"paused": "1"}).status_code == 400
    client.post(f"/ops/groups/{resource_group.name}/pause/", {"paused": "1", "reason": "incident", "confirmed": "1"})
    assert ResourceGroup.objects.get(pk=resource_group.pk).paused
    client.post(f"/ops/allocations/{job.pk}/override/", {"action": "protect", "until": "2030-01-01 00:00",
                                                          "reason": "deadline"})
    client.post(f"/ops/allocations/{job.pk}/override/", {"action": "force_preempt", "reason": "bad node",
                                                          "confirmed": "1"})
    job.refresh_from_db()
    assert job.protected_until is not None and job.state == "checkpointing"
    assert list(PolicyChange.objects.order_by("id").values_list("action", flat=True)) == [
        "pause", "protect", "force_preempt"]


def test_portal_shows_own_jobs_with_explanations_and_hides_others(client, tenant_physics, tenant_chemistry,
                                                                 resource_group, two_nodes, vcluster_hpc,
                                                                 django_user_model):
    from scheduling.models import Allocation

    bob = django_user_model.objects.get(username="bob")
    alice = django_user_model.objects.get(username="alice")
    common = {"resource_group": resource_group, "vcluster": vcluster_hpc, "node_count": 1, "per_node_gpu": 8,
              "checkpoint": "auto", "submitted_at": "2026-05-01T10:00:00Z", "state": "pending"}
    mine = [Allocation.objects.create(tenant=tenant_physics, user=alice, preemption_class=1, **common)
            for _ in range(2)]
    schedule_pass(resource_group.pk)
    theirs = Allocation.objects.create(tenant=tenant_chemistry, user=bob, preemption_class=8, **common)
    schedule_pass(resource_group.pk)
    client.force_login(alice)
    assert client.get(f"/jobs/{theirs.pk}/").status_code == 404
    victim = next(a for a in mine if a.preempted_in.exists())
    page = client.get(f"/jobs/{victim.pk}/").content.decode()
    assert "a class-8 allocation of another tenant" in page
    section = page.split("Preemptions")[1].split("History")[0]
    assert f"#{theirs.pk}" not in section and "chemistry" not in section and "bob" not in section
    listing = client.get("/jobs/").content.decode()
    assert f"#{victim.pk}" in listing and f"#{theirs.pk}" not in listing


def test_submit_form_what_if_stores_nothing_then_submit_stores(client, tenant_physics, resource_group, two_nodes):
    from scheduling.models import Allocation

    client.force_login(tenant_physics.memberships.first().user)
    form = {"resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1, "gpus_per_node": 8,
            "preemption_class": 3, "priority": 10, "checkpoint": "auto", "command": "sleep 5"}
    page = client.post("/jobs/new/", {**form, "action": "whatif"})
    assert b"What would happen now" in page.content and b"FITS" in page.content
    assert not Allocation.objects.exists()
    done = client.post("/jobs/new/", {**form, "action": "submit"})
    assert done.status_code == 302 and Allocation.objects.get().command == ["sleep", "5"]
    tenant_physics.quota.max_gpus = 8  # the stored job holds them all: another would pass the quota
    tenant_physics.quota.save()
    past = client.post("/jobs/new/", {**form, "action": "whatif"}).content.decode()
    assert "hard quota on GPUs (max_gpus)" in past and "What would happen now" not in past


def _vcluster_form(**over):
    return {"type": "hpc_batch", "allow_lending": "on", "allow_borrowing": "on", "max_borrow_pct": "1.0",
            "weights": "{}", "reason": "", **over}


def test_vcluster_editor_previews_on_the_current_state_and_saves_with_a_reason(
        client, operator, resource_group, vcluster_hpc, node_gpu_a, make_allocation, tenant_physics,
        django_user_model):
    from nodes.models import Node
    from scheduling.models import Allocation, VCluster

    ml = VCluster.objects.create(resource_group=resource_group, name="ml", allow_lending=True, max_borrow_pct=1.0)
    Node.objects.create(name="ml-a", resource_group=resource_group, vcluster=ml, gpu=8, cpu=64, memory=512,
                        state="ready")
    make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                    vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)  # fills gpu-a
    waiting = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                              vcluster=vcluster_hpc)  # would borrow ml-a now
    url = f"/ops/groups/{resource_group.name}/vclusters/{ml.pk}/"

    client.force_login(django_user_model.objects.get(username="alice"))
    assert client.get(url).status_code == 403
    client.force_login(operator)
    page = client.get(f"/ops/groups/{resource_group.name}/")
    assert url.encode() in page.content

    preview = client.post(url, _vcluster_form(allow_lending="", action="preview"))
    assert preview.status_code == 200
    [row] = preview.context["preview"]["pending"]
    assert (row["id"], row["now"]) == (waiting.pk, "fits FITS") and row["after"] != "fits FITS"
    assert VCluster.objects.get(pk=ml.pk).allow_lending is True and not PolicyChange.objects.exists()
    assert Allocation.objects.get(pk=waiting.pk).state == "pending"

    bad = client.post(url, _vcluster_form(max_borrow_pct="2", reason="more", action="save"))
    assert bad.status_code == 200 and "max_borrow_pct" in bad.context["form"].errors
    unexplained = client.post(url, _vcluster_form(allow_lending="", action="save"))
    assert "reason" in unexplained.context["form"].errors
    assert VCluster.objects.get(pk=ml.pk).max_borrow_pct == 1.0 and not PolicyChange.objects.exists()

    saved = client.post(url, _vcluster_form(allow_lending="", reason="ml needs its nodes", action="save"))
    assert saved.status_code == 302
    assert VCluster.objects.get(pk=ml.pk).allow_lending is False
    change = PolicyChange.objects.get()
    assert (change.before["allow_lending"], change.after["allow_lending"], change.reason) == (
        True, False, "ml needs its nodes")


def test_session_type_editor_saves_with_a_reason_and_stays_in_its_group(client, operator, resource_group):
    from scheduling.models import SessionType

    batch = SessionType.objects.create(resource_group=resource_group, name="batch")
    other = ResourceGroup.objects.create(name="rg-other", policy={"kind": "class_cost"})
    client.force_login(operator)
    assert client.get(f"/ops/groups/{other.name}/session-types/{batch.pk}/").status_code == 404
    assert client.get(f"/ops/groups/{resource_group.name}/nodes/{batch.pk}/").status_code == 404
    form = {"priority": "5", "rank": "20", "scope": "lower_or_equal", "criteria": "most_over_allocated",
            "default_class": "0", "mode": "terminate", "preempts": "[]", "reason": "scratch work",
            "action": "save"}
    assert client.post(f"/ops/groups/{resource_group.name}/session-types/{batch.pk}/", form).status_code == 302
    batch.refresh_from_db()
    assert (batch.mode, batch.rank) == ("terminate", 20)
    assert PolicyChange.objects.get().target_type == "scheduling.sessiontype"


def test_risk_is_shown_only_for_work_that_can_still_be_preempted(client, make_allocation, django_user_model):
    """An ended job has no risk; a non-preemptible one says so; a protection that has run out is not
    shown; one still to come is, and so are the classes above."""
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    done = make_allocation(state="completed", preemption_class=3, node_count=1, per_node_gpu=8)
    pinned = make_allocation(state="running", preemption_class=3, preemptible=False, node_count=1, per_node_gpu=8)
    lapsed = make_allocation(state="running", preemption_class=9, protected_until=now - timedelta(hours=1),
                             node_count=1, per_node_gpu=8)
    guarded = make_allocation(state="pending", preemption_class=2, protected_until=now + timedelta(hours=1),
                              node_count=1, per_node_gpu=8)
    client.force_login(django_user_model.objects.get(username="alice"))

    def risk(alloc) -> str:
        page = client.get(f"/jobs/{alloc.pk}/").content.decode()
        return re.sub(r"<[^>]+>", "", page.split("<dt>risk</dt>")[1].split("</dd>")[0]).strip()

    assert risk(done) == "none: it has ended"
    assert risk(pinned) == "not preemptible"
    assert risk(lapsed) == "1 class above"
    assert risk(guarded).startswith("protected until ") and risk(guarded).endswith("; 8 classes above")
    listing = client.get("/jobs/").content.decode()
    assert listing.count("none: it has ended") == 1 and listing.count("not preemptible") == 1


def test_the_job_page_shows_the_command_as_a_shell_would_read_it(client, make_allocation, django_user_model):
    """Arguments with spaces or shell characters are quoted: joined with spaces alone, the argv
    ``python -c 'import time; time.sleep(1)'`` read as two commands split at the semicolon."""
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8,
                          command=["python", "-c", "import time; time.sleep(1)", "--out", "my dir/x"])
    client.force_login(django_user_model.objects.get(username="alice"))
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    shown = html.unescape(page.split('<code id="job-command">')[1].split("</code>")[0])
    assert shown == "python -c 'import time; time.sleep(1)' --out 'my dir/x'"


def test_submit_form_offers_the_vclusters_open_to_the_tenant_and_the_session_types(
        client, tenant_physics, tenant_chemistry, resource_group, vcluster_hpc):
    from scheduling.models import Allocation, SessionType, VCluster

    private = VCluster.objects.create(resource_group=resource_group, name="chem-only", type="hpc_batch")
    private.tenants.add(tenant_chemistry)
    SessionType.objects.create(resource_group=resource_group, name="batch")
    client.force_login(tenant_physics.memberships.first().user)
    page = client.get("/jobs/new/").content.decode()
    assert '<option value="hpc">hpc (rg-main)</option>' in page
    assert '<option value="batch">batch (rg-main)</option>' in page
    assert "chem-only" not in page
    assert f'<option value="{resource_group.name}" selected>' in page  # the only group
    refused = client.post("/jobs/new/", {"resource_group": resource_group.name, "vcluster": "chem-only",
                                         "nodes": 1, "gpus_per_node": 8, "preemption_class": 3, "priority": 10,
                                         "checkpoint": "auto", "action": "submit"})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not Allocation.objects.exists()


def test_console_sums_up_each_group_nodes_and_work_by_state(client, operator, resource_group, two_nodes,
                                                            make_allocation, vcluster_hpc):
    from nodes.models import Node

    Node.objects.filter(pk=two_nodes[1].pk).update(state="down")
    for state in ("running", "pending", "pending", "completed"):
        make_allocation(state=state, node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    ResourceGroup.objects.create(name="rg-empty", policy={"kind": "priority"}, paused=True, shadow=True)
    client.force_login(operator)
    page = client.get("/ops/").content.decode()
    rows = {re.search(r'<a href="/ops/groups/([\w-]+)/">', row).group(1):
            " ".join(re.sub(r"<[^>]+>", " ", row.split("</tr>")[0]).split()).replace(" ,", ",")
            for row in page.split('<tr class="group-row"')[1:]}
    assert "active" in rows["rg-main"] and "1 down, 1 ready" in rows["rg-main"]
    assert "2 pending, 1 running" in rows["rg-main"] and "completed" not in rows["rg-main"]
    assert "paused" in rows["rg-empty"] and "shadow" in rows["rg-empty"] and "active" not in rows["rg-empty"]
    assert "none" in rows["rg-empty"] and "idle" in rows["rg-empty"]


def test_my_jobs_are_paged_and_filtered_by_state(client, tenant_physics, make_allocation):
    made = [make_allocation(state="completed" if i % 3 == 0 else "pending", node_count=1, per_node_gpu=8,
                            name=f"job-{i}") for i in range(120)]
    client.force_login(tenant_physics.memberships.first().user)

    def listed(url: str) -> tuple[list[int], str | None]:
        page = client.get(url).content.decode()
        ids = [int(x) for x in re.findall(r'<td><a href="/jobs/(\d+)/">', page)]
        older = re.search(r'<a href="(\?before=[^"]+)">older</a>', page)
        return ids, (older.group(1).replace("&amp;", "&") if older else None)

    def walk(url: str) -> list[int]:
        seen: list[int] = []
        while url:
            ids, older = listed(url)
            seen += ids
            url = f"/jobs/{older}" if older else ""
        return seen

    newest_first = sorted((a.pk for a in made), reverse=True)
    assert walk("/jobs/") == newest_first
    assert walk("/jobs/?state=pending") == [a.pk for a in reversed(made) if a.state == "pending"]
    assert listed("/jobs/?state=pending")[1].endswith("&state=pending")  # the filter holds on older pages
    assert walk("/jobs/?state=ended") == [a.pk for a in reversed(made) if a.state == "completed"]
    assert walk("/jobs/?state=live") == walk("/jobs/?state=pending")
    assert walk("/jobs/?state=nonsense") == newest_first  # an unknown filter shows everything
    assert "No state is called “nonsense”: showing all jobs." in client.get("/jobs/?state=nonsense").content.decode()
    assert "No state is called" not in client.get("/jobs/?state=pending").content.decode()


def test_a_preemption_by_the_tenant_s_own_work_links_to_it(client, tenant_physics, resource_group, two_nodes,
                                                          make_allocation, vcluster_hpc):
    low = [make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                           vcluster=vcluster_hpc) for _ in range(2)]
    schedule_pass(resource_group.pk)
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=8, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    victim = next(a for a in low if a.preempted_in.exists())
    client.force_login(tenant_physics.memberships.first().user)
    page = client.get(f"/jobs/{victim.pk}/").content.decode()
    assert f'by <a href="/jobs/{high.pk}/">#{high.pk}</a>' in page


def test_operators_protect_and_force_preempt_from_the_job_page(client, operator, resource_group, two_nodes,
                                                               make_allocation, vcluster_hpc):
    from datetime import timedelta

    from django.utils import timezone

    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, checkpoint="auto", vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    client.force_login(operator)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Protect for these hours" in page and "Force preempt now" in page and "Cancel this job" not in page
    url = f"/ops/allocations/{job.pk}/override/"
    refused = client.post(url, {"action": "protect", "reason": "deadline"})
    assert refused.status_code == 400 and "hours" in refused.content.decode()
    before = timezone.now()
    done = client.post(url, {"action": "protect", "hours": "2", "reason": "deadline"})
    assert done.status_code == 302 and done["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert before + timedelta(hours=2) <= job.protected_until <= timezone.now() + timedelta(hours=2)
    client.post(url, {"action": "force_preempt", "reason": "bad node", "confirmed": "1"})
    job.refresh_from_db()
    assert job.state == "checkpointing"
    assert "Force preempt now" not in client.get(f"/jobs/{job.pk}/").content.decode()  # it is leaving
    assert list(PolicyChange.objects.order_by("id").values_list("action", "reason")) == [
        ("protect", "deadline"), ("force_preempt", "bad node")]


def test_members_cancel_their_tenant_s_jobs_from_the_page_and_no_one_else_s(client, tenant_physics,
                                                                             tenant_chemistry, make_allocation,
                                                                             vcluster_hpc, resource_group):
    from scheduling.models import Allocation

    mine = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    theirs = Allocation.objects.create(resource_group=resource_group, vcluster=vcluster_hpc, tenant=tenant_chemistry,
                                       user=tenant_chemistry.memberships.first().user, state="pending",
                                       node_count=1, per_node_gpu=8, submitted_at="2026-05-01T10:00:00Z")
    client.force_login(tenant_physics.memberships.first().user)
    page = client.get(f"/jobs/{mine.pk}/").content.decode()
    assert "Cancel this job" in page and "Overrides" not in page
    assert client.post(f"/jobs/{theirs.pk}/cancel/", {"confirmed": "1"}).status_code == 404
    assert client.get(f"/jobs/{mine.pk}/cancel/").status_code == 405
    assert client.get(f"/jobs/{mine.pk}/hold/").status_code == 405  # a verb there is, asked with GET
    assert client.get(f"/jobs/{mine.pk}/x/").status_code == 404  # no such page, whatever the method
    assert client.post(f"/jobs/{mine.pk}/x/", {"reason": "r"}).status_code == 404
    assert client.post(f"/jobs/{mine.pk}/cancel/", {"confirmed": "1"})["Location"] == f"/jobs/{mine.pk}/"
    assert Allocation.objects.get(pk=mine.pk).state == "cancelled"
    assert Allocation.objects.get(pk=theirs.pk).state == "pending"
    again = client.post(f"/jobs/{mine.pk}/cancel/", {"confirmed": "1"})
    assert again.status_code == 409 and "already ended" in again.content.decode()
    assert "Cancel this job" not in client.get(f"/jobs/{mine.pk}/").content.decode()
    assert client.post(f"/ops/allocations/{mine.pk}/override/", {"action": "force_preempt", "reason": "x", "confirmed": "1"}
                       ).status_code == 403


def test_an_action_refused_says_why_on_a_page_with_the_navigation_and_a_way_back(
        client, operator, tenant_physics, resource_group, make_allocation, vcluster_hpc):
    """A job that ended between the page and the click, a hold without a reason, a protect
    without hours: each refusal is a page of the site, not a bare line of text."""
    job = make_allocation(state="completed", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    member = tenant_physics.memberships.first().user
    cases = [(member, f"/jobs/{job.pk}/cancel/", {"confirmed": "1"}, 409, "already ended", f"/jobs/{job.pk}/"),
             (operator, f"/jobs/{job.pk}/hold/", {"reason": ""}, 400, "a reason is required", f"/jobs/{job.pk}/"),
             (operator, f"/jobs/{job.pk}/hold/", {"reason": "x"}, 409, "only pending (or suspended) work can be held", f"/jobs/{job.pk}/"),
             (operator, f"/ops/allocations/{job.pk}/override/", {"action": "protect", "reason": "r"}, 400, "hours",
              f"/jobs/{job.pk}/"),
             (operator, f"/ops/groups/{resource_group.name}/pause/", {"paused": "1"}, 400, "a reason is required",
              f"/ops/groups/{resource_group.name}/")]
    for user, url, data, status, words, back in cases:
        client.force_login(user)
        answer = client.post(url, data)
        page = answer.content.decode()
        assert answer.status_code == status, url
        assert 'class="top lattice-nav"' in page and words in html.unescape(page), url
        assert f'href="{back}"' in page, url


@pytest.mark.parametrize("what", ["cancel", "force_preempt", "pause", "drain"])
def test_without_javascript_a_confirm_page_asks_first_and_nothing_changes_until_yes(
        client, operator, resource_group, vcluster_hpc, node_gpu_a, make_allocation, what):
    from nodes.models import Node
    from scheduling.models import Membership, Tenant

    Membership.objects.create(user=operator, tenant=Tenant.objects.get(name="physics"), role="admin")  # alice's job
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    client.force_login(operator)
    url, body = {
        "cancel": (f"/jobs/{job.pk}/cancel/", {}),
        "force_preempt": (f"/ops/allocations/{job.pk}/override/", {"action": "force_preempt", "reason": "r"}),
        "pause": (f"/ops/groups/{resource_group.name}/pause/", {"paused": "1", "reason": "r"}),
        "drain": ("/ops/nodes/gpu-a/", {"action": "drain", "reason": "r"}),
    }[what]
    asked = client.post(url, body)
    assert asked.status_code == 200 and b"Are you sure?" in asked.content
    assert all(f'name="{k}" value="{v}"'.encode() in asked.content for k, v in body.items())
    job.refresh_from_db()
    resource_group.refresh_from_db()
    assert (job.state, resource_group.paused, Node.objects.get().state) == ("running", False, "ready")
    done = client.post(url, {**body, "confirmed": "1"})
    assert done.status_code == 302
    job.refresh_from_db()
    resource_group.refresh_from_db()
    assert (job.state != "running") or resource_group.paused or Node.objects.get().state != "ready"
