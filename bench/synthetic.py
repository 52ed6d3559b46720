"""Synthetic resource groups for the benchmarks: packed GPU clusters with mixed work."""

from __future__ import annotations

import random
from dataclasses import replace

from scheduling.engine.model import Allocation, Node, SessionType, Tenant, VCluster

NOW = 1_777_636_800.0  # 2026-05-01T12:00:00Z
TENANTS = [f"t{i}" for i in range(12)]
QUEUES = [SessionType(name=f"q{i}", priority=10 * i, preemptive=i >= 3, preemptable=i <= 1,
                      rank=1 + 100 * i, scope="lower") for i in range(6)]
VCLUSTERS = [VCluster(name="train", type="ml_training", max_borrow_pct=0.1),
             VCluster(name="batch", type="hpc_batch", max_borrow_pct=0.1),
             VCluster(name="spare", type="hpc_batch", max_borrow_pct=0.1)]


def build(n_nodes: int, n_allocs: int, seed: int = 1) -> tuple[list[Node], list[Allocation], list[Tenant]]:
    """Nodes of 8 GPUs / 128 CPUs; `train` and `batch` packed full, `spare` 10% idle."""
    rnd = random.Random(seed)
    nodes = []
    for i in range(n_nodes):
        vc = "train" if i < n_nodes * 0.5 else "batch" if i < n_nodes * 0.9 else "spare"
        nodes.append(Node(name=f"n{i:05d}", capacity={"gpu": 8.0, "cpu": 128.0},
                          labels={"switch": f"s{i // 32:03d}"}, vcluster=vc))
    per_node = max(1, n_allocs // n_nodes)
    allocs: list[Allocation] = []
    i = 0
    idle_spare = set(rnd.sample(range(int(n_nodes * 0.9), n_nodes), max(1, n_nodes // 100)))
    while len(allocs) < n_allocs:
        for idx in range(n_nodes):
            if len(allocs) >= n_allocs:
                break
            if idx in idle_spare:
                continue
            node = nodes[idx]
            gpu_left, cpu_left = 8.0, 128.0
            for _ in range(per_node):
                if len(allocs) >= n_allocs:
                    break
                gpu = min(gpu_left, rnd.choice([1, 1, 2, 2, 4, 8, 0, 0])) if gpu_left else 0.0
                cpu = min(cpu_left, rnd.choice([4, 8, 16]))
                gpu_left -= gpu
                cpu_left -= cpu
                i += 1
                allocs.append(_alloc(rnd, f"a{i:07d}", {node.name: {"gpu": gpu, "cpu": cpu}}, node.vcluster))
        per_node = 1
    # a few gangs spanning 2-8 whole-GPU nodes replace single-node work in `train`
    return nodes, allocs, [Tenant(name=t, fair_share=1 / len(TENANTS), burst_allowance=1.5 if k % 3 == 0 else None,
                                  below_fair_share_since=NOW - 3600) for k, t in enumerate(TENANTS)]


def _alloc(rnd: random.Random, ident: str, placement: dict, vc: str | None) -> Allocation:
    return Allocation(
        id=ident, tenant=rnd.choice(TENANTS[1:]), user=f"u{rnd.randrange(50)}", vcluster=vc,
        session_type=rnd.choice(QUEUES[:4]).name, preemption_class=rnd.choice([0, 1, 2, 3, 4, 5, 6, 8]),
        priority=rnd.randrange(0, 60), checkpoint=rnd.choice(["auto", "auto", "manual", "none"]),
        checkpoint_minutes=rnd.choice([2.0, 5.0, 8.0]), started_at=NOW - rnd.randrange(60, 86400),
        walltime_minutes=rnd.choice([None, 600.0, 1440.0, 2880.0]), placement=placement,
        preempted_count=rnd.choice([0, 0, 0, 1]),
    )


def requests(n: int, nodes_per: int, seed: int = 2) -> list[Allocation]:
    """About 70% must preempt, 20% fit (on `spare`), 10% cannot be placed at all."""
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
