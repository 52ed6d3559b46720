"""Synthetic resource groups for the benchmarks: packed GPU clusters with mixed work."""

from __future__ import annotations

import random
from dataclasses import replace

from scheduling.engine.model import Allocation, Node, SessionType, Tenant, VCluster

NOW = 1_777_636_800.0  # 2026-05-01T12:00:00Z
TENANTS = [f"t{i:02d}" for i in range(12)]
QUEUES = [SessionType(name=f"q{i}", priority=10 * i, preemptive=i >= 3, preemptable=i <= 1,
                      rank=1 + 100 * i, scope="lower") for i in range(6)]
VCLUSTERS = [VCluster(name="train", type="ml_training", max_borrow_pct=0.1),
             VCluster(name="batch", type="hpc_batch", max_borrow_pct=0.1),
             VCluster(name="spare", type="hpc_batch", allow_lending=False)]
GPU_SPLITS = [[8], [4, 4], [4, 2, 2], [2, 2, 2, 2], [4, 2, 1, 1], [2, 2, 2, 1, 1], [4, 1, 1, 1, 1]]


def build(n_nodes: int, n_allocs: int, seed: int = 1) -> tuple[list[Node], list[Allocation], list[Tenant]]:
    """Nodes of 8 GPUs / 256 CPUs: `train` (50%) and `batch` (40%) full, `spare` (10%) with
    a tenth of its nodes idle. Every node holds GPU work plus CPU-only work up to the
    average count; 3% of `train` nodes are whole-node gangs of 2 to 4 nodes. Exactly ``n_allocs``
    allocations (CPU-only work evens the count out)."""
    rnd = random.Random(seed)
    nodes = [Node(name=f"n{i:05d}", capacity={"gpu": 8.0, "cpu": 256.0}, labels={"switch": f"s{i // 32:03d}"},
                  vcluster="train" if i < n_nodes * 0.5 else "batch" if i < n_nodes * 0.9 else "spare")
             for i in range(n_nodes)]
    idle = set(range(int(n_nodes * 0.9), n_nodes, 10))
    per_node = n_allocs / n_nodes
    allocs: list[Allocation] = []
    counter = 0
    i = 0
    while i < n_nodes:
        node = nodes[i]
        if i in idle:
            i += 1
            continue
        if node.vcluster == "train" and rnd.random() < 0.03 and i + 4 < n_nodes * 0.5:
            span = rnd.choice([2, 3, 4])
            counter += 1
            allocs.append(_alloc(rnd, counter, {nodes[i + j].name: {"gpu": 8.0, "cpu": 64.0} for j in range(span)},
                                 node.vcluster))
            i += span
            continue
        split = rnd.choice(GPU_SPLITS)
        target = max(len(split), int(per_node) + (1 if rnd.random() < per_node % 1 else 0))
        for k in range(target):
            gpu = float(split[k]) if k < len(split) else 0.0
            counter += 1
            allocs.append(_alloc(rnd, counter, {node.name: {"gpu": gpu, "cpu": 8.0}}, node.vcluster))
        i += 1
    _exact(allocs, nodes, idle, n_allocs, rnd, counter)
    tenants = [Tenant(name=t, fair_share=1 / len(TENANTS), burst_allowance=1.5 if k % 3 == 0 else None,
                      below_fair_share_since=NOW - 3600) for k, t in enumerate(TENANTS)]
    return nodes, allocs, tenants


def _exact(allocs: list[Allocation], nodes: list[Node], idle: set[int], n_allocs: int, rnd: random.Random,
           counter: int) -> None:
    """Exactly ``n_allocs`` running allocations: CPU-only work (8 CPUs) added round the busy nodes
    when the packing fell short (gangs and idle nodes hold fewer than the average), or the last
    CPU-only ones taken away when it went over."""
    busy = [node for k, node in enumerate(nodes) if k not in idle]
    k = 0
    while len(allocs) < n_allocs:
        node = busy[k % len(busy)]
        counter += 1
        allocs.append(_alloc(rnd, counter, {node.name: {"gpu": 0.0, "cpu": 8.0}}, node.vcluster))
        k += 1
    extra = len(allocs) - n_allocs
    for j in range(len(allocs) - 1, -1, -1):
        if extra <= 0:
            break
        if all(share.get("gpu", 0.0) == 0.0 for share in allocs[j].placement.values()):
            del allocs[j]
            extra -= 1


def _alloc(rnd: random.Random, counter: int, placement: dict, vc: str | None) -> Allocation:
    return Allocation(
        id=f"a{counter:07d}", tenant=rnd.choice(TENANTS[1:]), user=f"u{rnd.randrange(50)}", vcluster=vc,
        session_type=rnd.choice(QUEUES[:4]).name, preemption_class=rnd.choice([0, 1, 2, 3, 4, 5, 6, 8]),
        priority=rnd.randrange(0, 60), checkpoint=rnd.choice(["auto", "auto", "manual", "none"]),
        checkpoint_minutes=rnd.choice([2.0, 5.0, 8.0]), started_at=NOW - rnd.randrange(600, 86400),
        walltime_minutes=rnd.choice([None, 1440.0, 2880.0]), placement=placement,
        preempted_count=rnd.choice([0, 0, 0, 1]),
    )


def requests(n: int, nodes_per: int, seed: int = 2) -> list[Allocation]:
    """About 70% must preempt, 20% fit (on `spare`, single node), 10% cannot be placed."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        roll = rnd.random()
        base = Allocation(id=f"p{i}", tenant=TENANTS[0], user="u0", nodes=nodes_per, per_node={"gpu": 8.0},
                          preemption_class=rnd.choice([7, 8, 9]), priority=rnd.randrange(70, 100),
                          checkpoint="auto", session_type=QUEUES[5].name, submitted_at=NOW - 60)
        if roll < 0.7:
            out.append(replace(base, vcluster=rnd.choice(["train", "batch"])))
        elif roll < 0.9:
            out.append(replace(base, vcluster="spare", nodes=1))
        else:
            out.append(replace(base, vcluster="train", per_node={"gpu": 16.0}))
    return out
