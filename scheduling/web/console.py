"""The operator console's picture of the cluster (/ops/ and /ops/state/): per resource group its
counts and node tiles (GPUs used of total, coloured by how full), and what needs attention.

/ops/state/ answers the same fragment alone: the page's script asks for it again when the live
feed brings an event (a decision, a state change, a node heard from), so the counts, tiles and
attention panel follow the cluster without a reload. Everything is read from the database in a
fixed number of queries, whatever the number of groups or nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from nodes.models import Node, NodeDevice
from scheduling.models import Allocation, Placement, PreemptionDecision, ResourceGroup, TenantShare
from scheduling.passes.fairshare import status_of
from scheduling.passes.snapshot import policy_of
from scheduling.permissions import operator_required
from scheduling.states import HOLDING, State
from scheduling.web.charts import RANGES, group_charts

# The tiles' legend, in the order it is shown: (class, words).
LEGEND = [("idle", "idle"), ("partly", "partly used"), ("full", "full"), ("held", "held for a preemptor"),
          ("draining", "draining"), ("degraded", "degraded"), ("down", "down")]


@dataclass(frozen=True)
class Tile:
    node: Node
    used: int
    kind: str  # one of LEGEND's classes

    @property
    def level(self) -> int:
        """How full, in quarters (0 idle, 4 full): the colour scale of partly used tiles."""
        if not self.used or not self.node.gpu:
            return 0
        return min(4, max(1, round(4 * self.used / self.node.gpu)))


def tile_kind(state: str, gpus: int, used: int, held: bool) -> str:
    if state in ("down", "unknown"):
        return "down"
    if state in ("draining", "drained"):
        return "draining"
    if state == "degraded":
        return "degraded"
    if held:
        return "held"
    if used <= 0:
        return "idle"
    return "full" if used >= gpus else "partly"


def _counts(qs: Any) -> dict[int, list[tuple[str, int]]]:
    """Per resource group, how many rows of ``qs`` are in each state (one query), the most first."""
    out: dict[int, list[tuple[str, int]]] = {}
    rows = qs.values("resource_group_id", "state").annotate(n=Count("id"))
    for row in rows.order_by("resource_group_id", "-n", "state"):
        out.setdefault(row["resource_group_id"], []).append((row["state"], row["n"]))
    return out


def tiles_by_group(group_id: int | None = None) -> dict[int, list[Tile]]:
    """Each group's node tiles (only ``group_id``'s when given), in name order."""
    nodes, placements = Node.objects.all(), Placement.objects.all()
    if group_id is not None:
        nodes, placements = nodes.filter(resource_group_id=group_id), placements.filter(node__resource_group_id=group_id)
    used = dict(placements.filter(kind="assigned").values("node_id").annotate(g=Sum("gpu"))
                .values_list("node_id", "g"))
    held = set(placements.filter(kind="held").values_list("node_id", flat=True))
    out: dict[int, list[Tile]] = {}
    for node in nodes.select_related("borrowed_by", "vcluster").order_by("name"):
        n = int(used.get(node.pk) or 0)
        out.setdefault(node.resource_group_id, []).append(
            Tile(node, n, tile_kind(node.state, node.gpu, n, node.pk in held)))
    return out


def attention(groups: list[ResourceGroup]) -> dict[str, list[Any]]:
    """What an operator should look at: nodes degraded or down, checkpoints past their deadline,
    groups paused, tenants starving (as each group's policy judges now), devices reported unhealthy
    (or a reported inventory that differs from the registered one)."""
    now = timezone.now()
    policies = {g.pk: policy_of(g) for g in groups}
    starving = []
    for row in TenantShare.objects.filter(below_since__isnull=False).select_related("tenant", "resource_group"):
        policy = policies.get(row.resource_group_id)
        status = status_of(row.below_since, policy, now) if policy is not None else "normal"
        if status in ("starving", "aggressively_starving"):
            starving.append({"group": row.resource_group.name, "tenant": row.tenant.name,
                             "status": status.replace("_", " "), "since": row.below_since})
    unhealthy: dict[str, list[int]] = {n: [] for n in Node.objects.exclude(device_mismatch="")
                                       .values_list("name", flat=True)}
    for name, index in NodeDevice.objects.filter(healthy=False).values_list("node__name", "index"):
        unhealthy.setdefault(name, []).append(index)
    mismatch = dict(Node.objects.exclude(device_mismatch="").values_list("name", "device_mismatch"))
    return {
        "nodes": list(Node.objects.filter(state__in=["degraded", "down"]).select_related("resource_group")
                      .order_by("state", "name")),
        "checkpoints": list(Allocation.objects.filter(state=State.CHECKPOINTING, deadline_at__lt=now)
                            .select_related("tenant", "resource_group").order_by("deadline_at")),
        "paused": [g for g in groups if g.paused],
        "starving": sorted(starving, key=lambda s: (s["group"], s["tenant"])),
        "devices": [{"node": name, "indexes": sorted(indexes), "mismatch": mismatch.get(name, "")}
                    for name, indexes in sorted(unhealthy.items())],
    }


def cluster_state() -> dict[str, Any]:
    groups = list(ResourceGroup.objects.order_by("name"))
    nodes = _counts(Node.objects.all())
    work = _counts(Allocation.objects.filter(state__in=[State.PENDING, *HOLDING]))
    tiles = tiles_by_group()
    rows = []
    for g in groups:
        mine = tiles.get(g.pk, [])
        rows.append({"group": g, "nodes": nodes.get(g.pk, []), "work": work.get(g.pk, []), "tiles": mine,
                     "gpus_used": sum(t.used for t in mine if t.kind != "down"),
                     "gpus": sum(t.node.gpu for t in mine if t.kind != "down")})
    need = attention(groups)
    return {"groups": rows, "legend": LEGEND, "attention": need,
            "attention_count": sum(len(v) for v in need.values()), "now": timezone.now()}


@operator_required
def console(request: HttpRequest) -> HttpResponse:
    decisions = list(PreemptionDecision.objects.select_related("resource_group", "preemptor__tenant")
                     .order_by("-id")[:30])
    _name_victims(decisions)
    state = cluster_state()
    charts = [c for r in state["groups"] for c in group_charts(r["group"])]
    return render(request, "ops/console.html", {**state, "decisions": decisions, "charts": charts,
                                                "chart_ranges": RANGES})


@operator_required
def state(request: HttpRequest) -> HttpResponse:
    """The console's cluster fragment alone, for the page to swap in when the live feed moves."""
    return render(request, "ops/_cluster.html", cluster_state())


def _name_victims(decisions: list[PreemptionDecision]) -> None:
    """Each decision's victims as the live feed's lines name them, "#12 (physics, 2 × 8 GPU)"
    (one query for all): ``victim_lines``."""
    ids = {int(v["id"]) for d in decisions for v in d.victims or [] if str(v.get("id", "")).isdigit()}
    facts = {row[0]: row[1:] for row in Allocation.objects.filter(pk__in=ids).values_list(
        "id", "tenant__name", "node_count", "per_node_gpu")}
    for d in decisions:
        lines = []
        for v in d.victims or []:
            pk = int(v["id"]) if str(v.get("id", "")).isdigit() else None
            fact = facts.get(pk) if pk is not None else None
            lines.append(f"#{v.get('id')} ({fact[0]}, {fact[1]} × {fact[2]:g} GPU)" if fact else f"#{v.get('id')}")
        d.victim_lines = lines  # type: ignore[attr-defined]
