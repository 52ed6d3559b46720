"""The tenants' command line against a live server: every command, its exit codes, and that a
refusal or a bad file changes nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model

from nodes.models import Node
from scheduling.actions.lifecycle import allocation_exited
from scheduling.actions.tokens import api_token_issue
from scheduling.cli import main
from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def lattice(live_server, tenant_physics, resource_group, vcluster_hpc, node_gpu_a, tmp_path):
    """Run the command line as alice against the live server: (exit code, stdout)."""
    token_file = tmp_path / "token"
    token_file.write_text(api_token_issue(user=tenant_physics.memberships.first().user) + "\n")

    def run(*argv: str, token: str | None = None) -> tuple[int, str]:
        out = io.StringIO()
        auth = ["--token-file", str(token_file)] if token is None else ["--token-file", token]
        return main(["--url", live_server.url, *auth, *argv], out=out), out.getvalue()

    return run


def test_submit_list_show_events_explain_and_cancel(lattice, resource_group):
    code, out = lattice("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "8", "--class", "3",
                        "--name", "train", "--", "python", "train.py", "--epochs", "3")
    assert code == 0, out
    alloc = Allocation.objects.get()
    # Pending as admitted; without a broker the pass runs right after the commit, so it may be
    # running by the time it is read here.
    assert out.strip() == f"submitted #{alloc.pk} (pending)" and alloc.state in ("pending", "running")
    assert (alloc.tenant.name, alloc.name, alloc.per_node_gpu, alloc.preemption_class, alloc.command) == (
        "physics", "train", 8, 3, ["python", "train.py", "--epochs", "3"])

    schedule_pass(resource_group.pk)
    code, out = lattice("list")
    assert code == 0 and out.split()[:2] == [f"#{alloc.pk}", "running"]
    code, out = lattice("--json", "list", "--state", "running")
    assert code == 0 and [a["id"] for a in json.loads(out)] == [alloc.pk]
    assert lattice("list", "--state", "pending") == (0, "no allocations\n")
    code, out = lattice("show", str(alloc.pk))
    assert code == 0 and "rg-main/hpc" in out and "1 x 8 gpu" in out
    code, out = lattice("events", str(alloc.pk))
    assert code == 0 and [line.split("-> ")[1].split()[0] for line in out.splitlines()] == ["pending", "running"]
    code, out = lattice("explain", str(alloc.pk))
    assert code == 0 and out.splitlines()[0] == f"#{alloc.pk} is running"
    # Its process may still run: it keeps its node until its exit is reported.
    assert lattice("cancel", str(alloc.pk)) == (
        0, f"#{alloc.pk} is terminating: it ends cancelled once its process is gone\n")
    allocation_exited(allocation=alloc, exit_code=-15, reason="terminated")
    assert Allocation.objects.get().state == "cancelled"
    assert lattice("cancel", str(alloc.pk))[0] == 1  # ended: a 409


def test_what_if_prints_the_decision_and_stores_nothing(lattice):
    code, out = lattice("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "8", "--what-if")
    assert code == 0 and out.startswith("what-if: it would start now (FITS): This request (class ")
    assert out.rstrip().endswith("(nothing stored)")
    assert not Allocation.objects.exists()


def test_a_job_file_with_flags_over_it(lattice, tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 4, "cpu": 8},
                               "preemption_class": 2, "command": ["sleep", "60"]}))
    code, out = lattice("submit", "--file", str(job), "--class", "5", "--gpus", "8")
    assert code == 0, out
    alloc = Allocation.objects.get()
    assert (alloc.preemption_class, alloc.per_node_gpu, alloc.per_node_cpu, alloc.command) == (5, 8, 8, ["sleep", "60"])


def test_a_member_of_several_tenants_names_the_job_s_tenant(lattice, tenant_chemistry, tenant_physics):
    """Without ``--tenant`` such a member was told to name one in 'tenant', which no flag did."""
    from scheduling.models import Membership

    Membership.objects.create(user=tenant_physics.memberships.first().user, tenant=tenant_chemistry)
    job = ("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "8", "--", "train")
    assert lattice(*job)[0] == 1 and not Allocation.objects.exists()
    code, out = lattice("submit", "--tenant", "chemistry", *job[1:])
    assert code == 0, out
    assert Allocation.objects.get().tenant == tenant_chemistry


@pytest.mark.parametrize("content, message", [("{not json", "is not JSON"), ("[1, 2]", "must hold a JSON object"),
                                              ('{"vcluster": "hpc"}', "needs resources per node"),
                                              ('{"resource_group": "rg-main"}', "needs resources per node")])
def test_a_bad_job_file_is_exit_2_and_sends_nothing(lattice, tmp_path, capsys, content, message):
    job = tmp_path / "job.json"
    job.write_text(content)
    assert lattice("submit", "--file", str(job)) == (2, "")
    assert message in capsys.readouterr().err
    assert not Allocation.objects.exists()


def test_refusals_are_exit_1_with_the_servers_reason(lattice, tmp_path, capsys, tenant_chemistry,
                                                     resource_group, vcluster_hpc):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"resource_group": "rg-main", "per_node": {"tpu": 1}}))
    assert lattice("submit", "--file", str(job)) == (1, "")
    assert "400: per_node: unknown resource(s) tpu" in capsys.readouterr().err
    Node.objects.bulk_create([Node(name=f"n{i}", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8)
                              for i in range(9)])  # nodes enough: the quota is what refuses it
    assert lattice("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "8", "--nodes", "9",
                   "--", "true") == (1, "")
    assert "409: This job would pass your tenant's hard quota on nodes (max_nodes)" in capsys.readouterr().err  # the quota: 8 nodes
    assert not Allocation.objects.exists()

    theirs = Allocation.objects.create(resource_group=resource_group, vcluster=vcluster_hpc, tenant=tenant_chemistry,
                                       user=tenant_chemistry.memberships.first().user, state="pending",
                                       node_count=1, per_node_gpu=8, submitted_at="2026-05-01T10:00:00Z")
    assert lattice("cancel", str(theirs.pk)) == (1, "")
    assert "404" in capsys.readouterr().err
    assert Allocation.objects.get(pk=theirs.pk).state == "pending"

    wrong = tmp_path / "wrong"
    wrong.write_text("lat_" + "x" * 40)
    assert lattice("list", token=str(wrong)) == (1, "")
    assert "401" in (err := capsys.readouterr().err) or "403" in err
    assert "Invalid or revoked token" in err


def test_usage_errors_are_exit_2(lattice, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LATTICE_TOKEN", raising=False)
    assert main(["--url", "http://127.0.0.1:9", "list"], out=io.StringIO()) == 2
    assert "no API token" in capsys.readouterr().err
    assert lattice("list", token=str(tmp_path / "missing")) == (2, "")
    assert "cannot read the token file" in capsys.readouterr().err
    assert lattice("frobnicate") == (2, "")


def test_an_unreachable_server_is_exit_1(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("lat_x")
    assert main(["--url", "http://127.0.0.1:9", "--token-file", str(token), "list"], out=io.StringIO()) == 1
    assert "cannot reach" in capsys.readouterr().err


def test_it_runs_without_django():
    """It runs where a tenant works: importing it pulls in nothing of Django."""
    code = "import sys, scheduling.cli; print(any(m == 'django' or m.startswith('django.') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_explain_prints_a_waiting_jobs_queue_score_and_terms(lattice, resource_group):
    for _ in range(2):
        code, out = lattice("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "8", "--class", "3",
                            "--", "sleep", "60")
        assert code == 0, out
        schedule_pass(resource_group.pk)
    waiting = Allocation.objects.get(state="pending")
    code, out = lattice("explain", str(waiting.pk))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"#{waiting.pk} is pending"
    assert any(line.startswith("Queue score ") and "budget penalty 1.00 (no GPU-hours budget)" in line
               for line in lines)
    term_lines = [line.split() for line in lines if line.startswith("  f")]
    assert [t[0] for t in term_lines] == [f"f{i}" for i in range(1, 10)]
    assert " ".join(term_lines[0][:3]) == "f1 priority class" and "0.300 x 0.25 = 0.075" in lines[-9]


def test_queue_prints_positions_and_reasons_like_squeue(lattice, resource_group, tenant_chemistry, vcluster_hpc):
    for _ in range(2):
        assert lattice("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "8", "--class", "3",
                       "--", "train")[0] == 0
    schedule_pass(resource_group.pk)  # one runs on gpu-a, the other waits
    running, waiting = Allocation.objects.get(state="running"), Allocation.objects.get(state="pending")
    bob = tenant_chemistry.memberships.first().user
    theirs = Allocation.objects.create(resource_group=resource_group, tenant=tenant_chemistry, user=bob,
                                       vcluster=vcluster_hpc, state="pending", node_count=1, per_node_gpu=8,
                                       preemption_class=5, submitted_at=waiting.submitted_at)
    code, out = lattice("queue")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["JOBID", "NAME", "GROUP", "STATE", "CLASS", "PRIO", "NODES", "GPUS",
                                              "POS", "AHEAD", "REASON"]
    assert lines[1].split() == [str(waiting.pk), "-", "rg-main", "pending", "3", "10", "1", "8", "2", "1",
                                "(RESOURCES)"]
    assert lines[2].split()[:4] == [str(running.pk), "-", "rg-main", "running"] and len(lines) == 3
    assert str(theirs.pk) not in [line.split()[0] for line in lines]  # counted ahead, never shown
    code, out = lattice("queue", "--state", "pending", "--format", "id,pos,why")
    assert code == 0 and out.splitlines()[1].startswith(f"{waiting.pk:<8} 2     Not enough free capacity")
    assert lattice("queue", "--format", "id,bogus")[0] == 2
    code, out = lattice("queue", "--state", "pending", "--format", "id,score")  # the Lattice score orders it
    score = float(out.splitlines()[1].split()[1])
    assert 0 < score <= 1
    assert lattice("queue", "--state", "bogus")[0] == 1  # the server names the filter
    code, out = lattice("explain", str(waiting.pk))
    assert "why it waits (RESOURCES): Not enough free capacity" in out
    assert "place in the queue: 2 of 2, 1 ahead (1 by score)" in out


def test_usage_prints_gpu_hours_as_a_table_and_csv(lattice, make_allocation):
    from tests.scheduling.test_accounting import at, history

    history(make_allocation(node_count=1, per_node_gpu=4), [
        ("pending", at(0, 10, 0)), ("running", at(0, 11, 0)), ("completed", at(0, 11, 30))])
    window = ["--since", "2026-03-01T00:00:00Z", "--until", "2026-03-02T00:00:00Z"]
    code, out = lattice("usage", *window)
    assert code == 0, out
    assert out.splitlines()[1:] == ["tenant   day         gpu_seconds  gpu_hours  node_hours",
                                    "physics  2026-03-01  7200         2.0        0.5"]  # 30 min x 4 GPUs
    code, out = lattice("usage", *window, "--group-by", "user", "--csv")
    assert code == 0 and out.splitlines() == ["user,gpu_seconds,gpu_hours,node_hours", "alice,7200,2.0,0.5"]
    code, out = lattice("usage", "--tenant", "chemistry")
    assert code == 1
    get_user_model().objects.filter(username="alice").update(username="@alice")  # a spreadsheet reads @ as a formula
    code, out = lattice("usage", *window, "--group-by", "user", "--csv")
    assert code == 0 and out.splitlines()[1] == "'@alice,7200,2.0,0.5"


def test_an_array_is_one_line_in_list_and_its_pending_tasks_one_line_in_queue(lattice, resource_group):
    code, out = lattice("submit", "--group", "rg-main", "--vcluster", "hpc", "--gpus", "1", "--array", "0-3%1",
                        "--", "train")
    assert code == 0, out
    tasks = list(Allocation.objects.order_by("array_index"))
    array = tasks[0].array_id
    schedule_pass(resource_group.pk)
    assert [t.state for t in Allocation.objects.order_by("array_index")] == ["running", *["pending"] * 3]
    code, out = lattice("list")
    assert code == 0 and out.splitlines() == [
        f"array #{array:<5} 0-3%1         rg-main  4 tasks: 3 pending, 1 running"]
    code, out = lattice("list", "--array", str(array))
    assert len(out.splitlines()) == 4
    code, out = lattice("queue", "--format", "id,state,pos,reason")
    lines = [line.split() for line in out.splitlines()[1:]]
    assert lines == [[f"{array}_[1-3]", "pending", "-", "(ARRAY_THROTTLE)"], [str(tasks[0].pk), "running", "-", "-"]]


def test_explain_names_what_puts_others_ahead_in_words_as_the_job_page_does():
    from scheduling.cli import explain_lines
    lines = explain_lines({"allocation": 7, "state": "pending", "preemptions": [], "queue": {
        "position": 4, "queued": 9, "ahead": 3, "ahead_by": {"holds_nodes": 1, "starving": 1, "submitted_at": 1}}})
    assert "place in the queue: 4 of 9, 3 ahead (1 by holding nodes, 1 by tenant starving, 1 by submitted)" in lines
