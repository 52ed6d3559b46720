"""An array is one line that expands: ``GET /api/v1/arrays/`` with each array's tasks counted by
state (another tenant's arrays never listed), and the jobs page's one row per array whose details
list its tasks."""

from __future__ import annotations

import re

import pytest

from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import exit_on, job, job_id, post, sent_fixture  # noqa: F401
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def arrays(resource_group, vcluster_hpc, two_nodes, tenant_physics, tenant_chemistry, operator, sent):
    """Alice's array of five (at most two at once; one task held, one completed), a single job of
    hers, and an array of bob's."""
    alice = client_for("alice")
    body = job(alice, array="0-4%2", per_node={"gpu": 1}).json()
    tasks = [t["id"] for t in body["tasks"]]
    assert post(alice, f"/api/v1/allocations/{tasks[4]}/hold/").status_code == 200
    schedule_pass(resource_group.pk)
    exit_on(tasks[0], code=0, reason="completed")
    schedule_pass(resource_group.pk)
    single = job_id(alice, per_node={"gpu": 1}, name="single")
    theirs = job(client_for("bob"), array="0-1", per_node={"gpu": 1}).json()["id"]
    return body["id"], tasks, single, theirs


def test_the_api_lists_each_array_with_its_tasks_counted_by_state(arrays):
    array, tasks, _, theirs = arrays
    states = [Allocation.objects.get(pk=pk).state for pk in tasks]
    assert states == ["completed", "running", "running", "pending", "pending"]
    body = client_for("alice").get("/api/v1/arrays/").json()
    assert [a["id"] for a in body["results"]] == [array]  # bob's is never listed
    line = body["results"][0]
    assert line["counts"] == {"completed": 1, "running": 2, "pending": 2, "held": 1}
    assert "tasks" not in line
    detail = client_for("alice").get(f"/api/v1/arrays/{array}/").json()
    assert detail["counts"] == line["counts"] and [t["id"] for t in detail["tasks"]] == tasks
    assert client_for("bob").get(f"/api/v1/arrays/{array}/").status_code == 404
    assert [a["id"] for a in client_for("op").get("/api/v1/arrays/").json()["results"]] == [theirs, array]


def test_the_jobs_page_shows_an_array_as_one_row_that_expands_to_its_tasks(arrays):
    array, tasks, single, _ = arrays
    page = client_for("alice").get("/jobs/").content.decode()
    assert page.count('class="array-line"') == 1 and f'data-array="{array}"' in page
    summary = re.search(r"<summary>(.*?)</summary>", page, re.S).group(1)
    assert "0-4%2" in summary and "1 completed" in summary and "2 running" in summary and "2 pending" in summary
    # Every task is in the row's details, and no task has a row of its own; the single job does.
    details = page[page.index('class="array-line"'):page.index("</details>")]
    assert all(f'href="/jobs/{pk}/"' in details for pk in tasks)
    rest = page.replace(details, "")
    assert not any(f'href="/jobs/{pk}/"' in rest for pk in tasks) and f'href="/jobs/{single}/"' in rest
    # One array's tasks, one a row.
    listed = client_for("alice").get(f"/jobs/?array={array}").content.decode()
    assert 'class="array-line"' not in listed and all(f'href="/jobs/{pk}/"' in listed for pk in tasks)
    # Filtered by state, the array still shows as one line when any of its tasks is in it.
    running = client_for("alice").get("/jobs/?state=running").content.decode()
    assert running.count('class="array-line"') == 1 and f'href="/jobs/{single}/"' not in running
