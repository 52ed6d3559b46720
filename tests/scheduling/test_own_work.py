"""Within a tenant, as Slurm's users and account coordinators: a member cancels, holds or releases
the work they submitted, never a colleague's; an admin of the tenant (``Membership.role``) acts on
any of its work. Alike over REST (jobs and arrays) and on the job page, where a colleague is shown
who may act instead of buttons; a refusal changes nothing."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Membership
from tests.scheduling.batch_helpers import job, post
from tests.scheduling.seed_e2e import client_for

REFUSED = "a member may {verb} only the work they submitted"


@pytest.fixture
def colleagues(django_user_model, tenant_physics, resource_group, vcluster_hpc, two_nodes):
    """physics: alice (the usual submitter), dave (a member) and erin (an admin)."""
    for name, role in (("dave", "member"), ("erin", "admin")):
        user = django_user_model.objects.create_user(name, password=f"pw-{name}-123")
        Membership.objects.create(user=user, tenant=tenant_physics, role=role)
    return tenant_physics


def _alices(**body):
    alice = client_for("alice")
    response = job(alice, per_node={"gpu": 1}, held=True, **body)
    assert response.status_code == 201, response.json()
    return response.json()


def _unchanged(pk: int, held: bool = True) -> None:
    row = Allocation.objects.get(pk=pk)
    assert (row.state, row.held) == ("pending", held)


@pytest.mark.django_db
def test_a_member_may_not_cancel_hold_or_release_a_colleagues_job_over_rest(colleagues):
    pk = _alices()["id"]
    dave = client_for("dave")
    for verb in ("release", "cancel"):
        response = post(dave, f"/api/v1/allocations/{pk}/{verb}/")
        assert response.status_code == 403 and REFUSED.format(verb=verb) in response.json()["detail"], verb
        _unchanged(pk)
    post(client_for("alice"), f"/api/v1/allocations/{pk}/release/")
    response = post(dave, f"/api/v1/allocations/{pk}/hold/")
    assert response.status_code == 403 and REFUSED.format(verb="hold") in response.json()["detail"]
    _unchanged(pk, held=False)
    assert client_for("dave").get(f"/api/v1/allocations/{pk}/").status_code == 200  # still seen: one tenant

    own = job(dave, per_node={"gpu": 1}, held=True).json()["id"]
    assert post(dave, f"/api/v1/allocations/{own}/release/").json()["held"] is False
    assert post(dave, f"/api/v1/allocations/{own}/cancel/").json()["state"] == "cancelled"


@pytest.mark.django_db
def test_an_admin_of_the_tenant_acts_on_any_of_its_work(colleagues):
    pk = _alices()["id"]
    erin = client_for("erin")
    assert post(erin, f"/api/v1/allocations/{pk}/release/").json()["held"] is False
    assert post(erin, f"/api/v1/allocations/{pk}/hold/").json()["held"] is True
    assert post(erin, f"/api/v1/allocations/{pk}/cancel/").json()["state"] == "cancelled"


@pytest.mark.django_db
def test_an_array_is_its_submitters_and_the_admins(colleagues):
    array = _alices(array="0-2")["id"]
    dave = client_for("dave")
    for verb in ("release", "cancel"):
        response = post(dave, f"/api/v1/arrays/{array}/{verb}/")
        assert response.status_code == 403 and REFUSED.format(verb=verb) in response.json()["detail"], verb
    assert sorted(Allocation.objects.filter(array_id=array).values_list("state", "held")) == [("pending", True)] * 3
    done = post(client_for("erin"), f"/api/v1/arrays/{array}/cancel/").json()
    assert len(done["done"]) == 3 and not done["skipped"]
    assert set(Allocation.objects.filter(array_id=array).values_list("state", flat=True)) == {"cancelled"}


@pytest.mark.django_db
def test_the_job_page_tells_a_colleague_who_may_act_and_refuses_a_posted_verb(colleagues):
    pk = _alices()["id"]
    dave = client_for("dave")
    page = dave.get(f"/jobs/{pk}/").content.decode()
    assert "Cancel this job" not in page and "Release this job" not in page
    assert "Submitted by alice: only they, or an admin of the tenant, may cancel, hold or release it." in page
    for verb, data in (("cancel", {"confirmed": "1"}), ("release", {"reason": ""})):
        response = dave.post(f"/jobs/{pk}/{verb}/", data)
        assert response.status_code == 403 and REFUSED.format(verb=verb) in response.content.decode(), verb
        _unchanged(pk)

    for who in ("alice", "erin"):
        page = client_for(who).get(f"/jobs/{pk}/").content.decode()
        assert "Cancel this job" in page and "Release this job" in page and "Submitted by" not in page, who
    response = client_for("erin").post(f"/jobs/{pk}/cancel/", {"confirmed": "1"})
    assert response.status_code == 302 and Allocation.objects.get(pk=pk).state == "cancelled"
