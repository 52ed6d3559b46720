"""manage.py seed_demo: a believable demo cluster. Safe to run again (idempotent)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone

from nodes.models import Node, NodeState
from scheduling.management.database import DatabaseCommand
from scheduling.models import (
    Allocation,
    AllocationEvent,
    Membership,
    Placement,
    Quota,
    ResourceGroup,
    SessionType,
    Tenant,
    VCluster,
)
from scheduling.permissions import OPERATORS_GROUP
from scheduling.states import State
from scheduling.usage_demo import seed_history

# Demo-only credentials; the README says so too.
OPERATOR = ("operator", "lattice-operator")
MEMBERS = {"physics": "alice", "chemistry": "bob", "biology": "carol"}
MEMBER_PASSWORD = "lattice-demo"

GROUPS: list[dict[str, Any]] = [
    {
        "name": "gpu-main",
        "description": "H100 training and batch cluster; checkpoint-aware classes.",
        # Anti-thrash, as an operator would set it: work runs a minute before it can be preempted,
        # and is preempted at most three times (the demo's traffic would otherwise bounce some
        # jobs every few seconds).
        "policy": {"kind": "class_cost", "max_victims": 3, "mode": "suspend", "min_runtime_minutes": 1,
                   "max_preemptions_per_job": 3},
        "vclusters": [
            ("hpc", "hpc_batch", 16, "gm"),
            ("ml", "ml_training", 12, "gm"),
            ("svc", "service", 4, "gm"),
        ],
    },
    {
        "name": "shared-east",
        "description": "Shared interactive and sensitive cluster; Symphony-style session ranks.",
        "policy": {"kind": "rank", "max_victims": None, "mode": "suspend"},
        "vclusters": [
            ("east", "hpc_batch", 8, "se"),
            ("lab", "interactive", 8, "se"),
            ("secure", "sensitive", 4, "se"),
        ],
    },
    {
        "name": "fair-west",
        "description": "Fair-share batch cluster; YTsaurus-style starvation and preemption.",
        # A tenant below 80 % of its fair share with work waiting starves after 30 s and may then
        # preempt the newest work of tenants above their share; never work within a tenant's share.
        # Its work is whole 8-GPU nodes, an eighth of the group each: a preemption can drop the
        # victim's tenant below its own line, which then starves 30 s later and takes a node back,
        # and so on (a 2-minute job was preempted 10 times in 11 minutes). So work placed keeps
        # running for 5 minutes, and a job is preempted at most twice.
        "policy": {"kind": "fair_share", "mode": "suspend", "tolerance": 0.8, "starvation_timeout_s": 30,
                   "aggressive_starvation_timeout_s": 120, "enable_aggressive": False,
                   "preemption_threshold": 1.0, "aggressive_threshold": 1.0,
                   "preemptive_scheduling_backoff_s": 5, "min_runtime_minutes": 5, "max_preemptions_per_job": 2},
        "vclusters": [("west", "hpc_batch", 8, "fw")],
    },
]

SESSION_TYPES = [
    # name, priority, preemptive, preemptable, preempts, rank, scope, default class
    ("scavenger", 10, False, True, [], 5, "lower", 0),
    ("batch", 30, False, False, [], 50, "lower", 3),
    ("production", 60, True, False, [{"queue": "scavenger", "pref": 2}, "batch"], 100, "lower", 6),
    ("critical", 90, True, False, [], 1000, "lower", 9),
]

TENANTS = {
    # Budgets (GPU-hours a calendar month) far above what a demo session runs: no queue-score
    # penalty, a line on the portal's chart.
    "physics": {"fair_share": 0.40, "burst_allowance": 1.5, "max_nodes": 24, "max_gpus": 192, "budget": 40000},
    "chemistry": {"fair_share": 0.35, "burst_allowance": 1.2, "max_nodes": 16, "max_gpus": 128, "budget": 30000},
    "biology": {"fair_share": 0.25, "burst_allowance": None, "max_nodes": 12, "max_gpus": 96, "budget": 20000},
}


class Command(DatabaseCommand):
    help = "Create (or complete) the demo cluster: resource groups, vClusters, nodes, tenants, users."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        operators, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
        operators.permissions.set(Permission.objects.filter(content_type__app_label__in=["scheduling", "nodes"]))
        op, created = User.objects.get_or_create(username=OPERATOR[0], defaults={"is_staff": True})
        if created:
            op.set_password(OPERATOR[1])
            op.save()
        op.groups.add(operators)

        for spec in GROUPS:
            rg, _ = ResourceGroup.objects.get_or_create(
                name=spec["name"], defaults={"description": spec["description"], "policy": spec["policy"]})
            for name, priority, preemptive, preemptable, preempts, rank, scope, dclass in SESSION_TYPES:
                SessionType.objects.get_or_create(
                    resource_group=rg, name=name,
                    defaults={"priority": priority, "preemptive": preemptive, "preemptable": preemptable,
                              "preempts": preempts, "rank": rank, "scope": scope, "default_class": dclass})
            for vname, vtype, count, prefix in spec["vclusters"]:
                vc, _ = VCluster.objects.get_or_create(
                    resource_group=rg, name=vname,
                    defaults={"type": vtype, "allow_lending": vtype not in ("sensitive", "service"),
                              "max_borrow_pct": 0.25})
                for i in range(1, count + 1):
                    Node.objects.get_or_create(
                        name=f"{prefix}-{vname}-{i:02d}",
                        defaults={"resource_group": rg, "vcluster": vc, "gpu": 8, "cpu": 96, "memory": 1024,
                                  "labels": {"switch": f"{prefix}-s{(i - 1) // 4 + 1}", "gpu_model": "h100"},
                                  "state": NodeState.READY})

        main = ResourceGroup.objects.get(name="gpu-main")  # where work goes without --group
        for tname, q in TENANTS.items():
            tenant, _ = Tenant.objects.get_or_create(name=tname, defaults={"display_name": tname.title()})
            Quota.objects.get_or_create(tenant=tenant, defaults={
                "fair_share": q["fair_share"], "burst_allowance": q["burst_allowance"],
                "max_nodes": q["max_nodes"], "max_gpus": q["max_gpus"], "max_concurrent_allocations": 40,
                "max_preemption_class": 9, "max_priority": 90,
                "gpu_hours_budget": q["budget"], "default_resource_group": main})
            user, created = User.objects.get_or_create(username=MEMBERS[tname])
            if created:
                user.set_password(MEMBER_PASSWORD)
                user.save()
            Membership.objects.get_or_create(user=user, tenant=tenant, defaults={"role": "admin"})

        self._seed_work()
        history = seed_history(timezone.now())  # the charts' past; the sampler goes on from it
        if history:
            self.stdout.write(f"  usage history: {history} samples over the past week (made up for the demo)")
        self.stdout.write(self.style.SUCCESS(
            f"Demo ready: {ResourceGroup.objects.count()} resource groups, {Node.objects.count()} nodes, "
            f"{Tenant.objects.count()} tenants."))
        self.stdout.write(f"  operator login: {OPERATOR[0]} / {OPERATOR[1]}   (demo only)")
        for tname, uname in MEMBERS.items():
            self.stdout.write(f"  {tname} member:  {uname} / {MEMBER_PASSWORD}   (demo only)")

    def _seed_work(self) -> None:
        """A few running allocations so the demo has something to preempt, made oldest first so
        that ids and submission times agree (lists are newest first by id)."""
        if Allocation.objects.exists():
            return
        now = timezone.now()
        rg = ResourceGroup.objects.get(name="gpu-main")
        hpc = VCluster.objects.get(resource_group=rg, name="hpc")
        ml = VCluster.objects.get(resource_group=rg, name="ml")
        batch = SessionType.objects.get(resource_group=rg, name="batch")
        scav = SessionType.objects.get(resource_group=rg, name="scavenger")
        plan = [
            # group, tenant, vcluster, nodes, class, checkpoint, session, hours ago, walltime h
            (rg, "physics", hpc, ["gm-hpc-01", "gm-hpc-02"], 2, "auto", batch, 5, 24),
            (rg, "physics", hpc, ["gm-hpc-03"], 4, "manual", batch, 2, 12),
            (rg, "chemistry", hpc, ["gm-hpc-05", "gm-hpc-06", "gm-hpc-07", "gm-hpc-08"], 3, "auto", batch, 8, 48),
            (rg, "chemistry", ml, ["gm-ml-01"], 1, "none", scav, 1, None),
            (rg, "biology", ml, ["gm-ml-02", "gm-ml-03"], 5, "auto", batch, 3, 10),
            (rg, "biology", hpc, ["gm-hpc-09"], 0, "auto", scav, 0.5, 4),
        ]
        self._run_plan(sorted(plan + self._fair_share_plan(), key=lambda entry: -entry[7]), now)
        self._seed_waiting(now)

    def _fair_share_plan(self) -> list[Any]:
        """fair-west full with physics' and chemistry's work, and biology (nothing running) waiting
        (``_seed_waiting``): on the group page biology goes from below its fair share to starving,
        then preempts."""
        rg = ResourceGroup.objects.get(name="fair-west")
        west = VCluster.objects.get(resource_group=rg, name="west")
        batch = SessionType.objects.get(resource_group=rg, name="batch")
        return [
            (rg, "physics", west, ["fw-west-01", "fw-west-02"], 3, "auto", batch, 3, 24),
            (rg, "physics", west, ["fw-west-03", "fw-west-04", "fw-west-05"], 3, "auto", batch, 1, 24),
            (rg, "chemistry", west, ["fw-west-06", "fw-west-07"], 3, "auto", batch, 2, 24),
            (rg, "chemistry", west, ["fw-west-08"], 3, "auto", batch, 0.5, 24),
        ]

    def _seed_waiting(self, now: Any) -> None:
        rg = ResourceGroup.objects.get(name="fair-west")
        west = VCluster.objects.get(resource_group=rg, name="west")
        batch = SessionType.objects.get(resource_group=rg, name="batch")
        tenant = Tenant.objects.get(name="biology")
        user = Membership.objects.filter(tenant=tenant).first().user  # type: ignore[union-attr]
        waiting = Allocation.objects.create(
            resource_group=rg, tenant=tenant, user=user, vcluster=west, session_type=batch, name="biology-batch-3",
            preemption_class=3, checkpoint="auto", submitted_at=now, state=State.PENDING, state_changed_at=now,
            node_count=1, per_node_gpu=8, per_node_cpu=64, per_node_memory=512, walltime_minutes=120,
            command=["python", "-c", "import time; time.sleep(3600)"])
        AllocationEvent.objects.create(allocation=waiting, from_state="", to_state=State.PENDING, reason="seeded")

    def _run_plan(self, plan: list[Any], now: Any) -> None:
        for rg, tname, vc, node_names, klass, ckpt, st, ago, wall in plan:
            tenant = Tenant.objects.get(name=tname)
            user = Membership.objects.filter(tenant=tenant).first().user  # type: ignore[union-attr]
            started = now - timedelta(hours=ago)
            alloc = Allocation.objects.create(
                resource_group=rg, tenant=tenant, user=user, vcluster=vc, session_type=st,
                name=f"{tname}-{st.name}-{klass}", preemption_class=klass, checkpoint=ckpt,
                submitted_at=started - timedelta(minutes=3), started_at=started, state=State.RUNNING,
                state_changed_at=started, node_count=len(node_names), per_node_gpu=8, per_node_cpu=64,
                per_node_memory=512, walltime_minutes=wall * 60 if wall else None, ran_on=node_names,
                command=["python", "-c", "import time; time.sleep(3600)"])
            for nname in node_names:
                Placement.objects.create(allocation=alloc, node=Node.objects.get(name=nname),
                                         gpu=8, cpu=64, memory=512)
            # Dated as the work they describe (created_at is set on insert): the accounting bills
            # from the events, so the job page's GPU-hours agree with its elapsed time.
            submitted = AllocationEvent.objects.create(allocation=alloc, from_state="", to_state=State.PENDING,
                                                       reason="seeded")
            start = AllocationEvent.objects.create(allocation=alloc, from_state=State.PENDING,
                                                   to_state=State.RUNNING, reason="seeded")
            AllocationEvent.objects.filter(pk=submitted.pk).update(created_at=alloc.submitted_at)
            AllocationEvent.objects.filter(pk=start.pk).update(created_at=started)
