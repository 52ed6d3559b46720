"""priority: per node, every candidate off, then the most important given back; nodes by the node rule."""

from __future__ import annotations

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .placement import RequestView, give_back
from .select import Selection, feasible_with_all, open_entries
from .select_priority_pool import PoolVictims, pool_victims


def _importance_order(view: RequestView, start: FArr, newest: bool, now: float) -> IArr:
    cluster = view.cluster
    live = cluster.live_entries()

    def build() -> IArr:
        slots = cluster.e_alloc[live]
        st = start[slots]
        order = np.lexsort((cluster.id_rank()[slots], st if newest else -st, -cluster.a_prio[slots],
                            cluster.e_node[live]))
        result: IArr = live[order]
        return result

    result: IArr = cluster.cached(("importance", newest, now), build)
    return result


def _open_importance_order(view: RequestView, start: FArr, newest: bool, now: float) -> IArr:
    """The importance order of the entries any pool of this request shape draws from (cached per
    shape): a decision filters these, not every live entry."""
    cluster = view.cluster

    def build() -> IArr:
        order = _importance_order(view, start, newest, now)
        is_open = np.zeros(len(cluster.e_alloc), dtype=bool)
        is_open[open_entries(view)[0]] = True
        result: IArr = order[is_open[order]]
        return result

    result: IArr = cluster.cached(("importance_open", newest, now, view.shape_key), build)
    return result


def _node_keys(view: RequestView, victim_ents: IArr, start: FArr, newest: bool,
               only: BArr | None = None) -> dict[str, FArr]:
    """Per node, the node rule's keys of its victims: highest priority, how many, the sum of their
    priorities, the earliest start among those of the highest priority (latest when ``newest``).
    ``victim_ents`` are grouped by node, most important first within a node (so a node's first
    victim has its highest priority). The sum and the start are computed for the nodes in
    ``only`` (all when None), each a reduction over the node's run."""
    cluster = view.cluster
    n = len(cluster.node_names)
    top, count = np.full(n, -1.0), np.zeros(n)
    total, earliest = np.zeros(n), np.zeros(n)
    if len(victim_ents):
        nodes = cluster.e_node[victim_ents]
        first = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
        runs = np.diff(np.r_[first, len(nodes)])
        at = nodes[first]
        top[at] = cluster.a_prio[cluster.e_alloc[victim_ents[first]]]
        count[at] = runs
        keep = only[at] if only is not None else np.ones(len(at), dtype=bool)
        if keep.any():
            f, r = first[keep], runs[keep]
            sub_first = np.r_[0, np.cumsum(r)[:-1]]
            idx = np.repeat(f - sub_first, r) + np.arange(int(r.sum()))
            slots = cluster.e_alloc[victim_ents[idx]]
            prio = cluster.a_prio[slots].astype(float)
            total[at[keep]] = np.add.reduceat(prio, sub_first)
            earliest[at[keep]] = np.minimum.reduceat(np.where(prio == top[nodes[idx]], start[slots], np.inf),
                                                     sub_first)
    return {"top": top, "count": count, "sum": total, "start": -earliest if newest else earliest}


def _tied_keys(view: RequestView, got: PoolVictims, start: FArr, newest: bool, allowed: BArr) -> dict[str, FArr]:
    """The node rule's keys as ``_node_keys`` gives them, the sum and the start computed only on
    the ``allowed`` nodes (found by their runs in the kept victims, not by reading them all)."""
    cluster = view.cluster
    n = len(cluster.node_names)
    total, earliest = np.zeros(n), np.zeros(n)
    tied = np.flatnonzero(allowed)
    lo = np.searchsorted(got.victim_nodes, tied)
    hi = np.searchsorted(got.victim_nodes, tied, side="right")
    has = hi > lo
    at, lo, runs = tied[has], lo[has], (hi - lo)[has]
    if len(at):
        sub_first = np.r_[0, np.cumsum(runs)[:-1]]
        idx = np.repeat(lo - sub_first, runs) + np.arange(int(runs.sum()))
        slots = cluster.e_alloc[got.victim_ents[idx]]
        prio = cluster.a_prio[slots].astype(float)
        total[at] = np.add.reduceat(prio, sub_first)
        earliest[at] = np.minimum.reduceat(np.where(prio == got.top[got.victim_nodes[idx]], start[slots], np.inf),
                                           sub_first)
    return {"top": got.top, "count": got.count, "sum": total, "start": -earliest if newest else earliest}


def _best_node(keys: dict[str, FArr], allowed: BArr) -> int | None:
    cand = np.flatnonzero(allowed)
    if not len(cand):
        return None
    for name in ("top", "count", "sum", "start"):
        values = keys[name][cand]
        cand = cand[values <= values.min() + EPS] if name == "start" else cand[values == values.min()]
    return int(cand[0])


def select_priority(view: RequestView, pool: BArr, start: FArr, bound: int | None, now: float,
                    newest: bool) -> Selection:
    cluster = view.cluster
    order = _open_importance_order(view, start, newest, now)
    got = pool_victims(view, pool, order, newest, now, _per_node_victims)
    potential = got.potential
    if not got.size or not feasible_with_all(view, potential):
        return Selection(None, "NO_FEASIBLE_SET")
    if view.k == 1:
        # The node rule's first key is the highest priority: the other keys are needed only on
        # the nodes tied at its least.
        allowed = potential.copy()
        if bound is not None:
            allowed &= got.count <= bound
        if not allowed.any():
            return Selection(None, "EXCEEDS_MAX_VICTIMS")
        allowed &= got.top == got.top[allowed].min()
        node = _best_node(_tied_keys(view, got, start, newest, allowed), allowed)
        assert node is not None
        return Selection(sorted(got.slots_on(cluster, node)))
    ordered = order[pool[cluster.e_alloc[order]]]
    ordered = ordered[potential[cluster.e_node[ordered]]]
    victim_ents = got.victim_ents
    per_node = _NodeVictims(cluster, victim_ents)
    keys = _node_keys(view, victim_ents, start, newest)
    best: tuple[tuple[float, ...], list[str], list[int]] | None = None
    over_bound = False
    for g in view.groups.tolist():
        picked = _pick_nodes(view, g, potential, keys, per_node, ordered, start, newest)
        if picked is None:
            continue
        chosen, victims = picked
        if bound is not None and len(victims) > bound:
            over_bound = True
            continue
        key = _set_key(cluster, victims, start, newest)
        names = sorted(cluster.node_names[i] for i in chosen)
        if best is None or (key, names) < (best[0], best[1]):
            best = (key, names, victims)
    if best is None:
        return Selection(None, "EXCEEDS_MAX_VICTIMS" if over_bound else "NO_FEASIBLE_SET")
    return Selection(sorted(best[2]))


class _NodeVictims:
    """Victim slots per node, read from entries grouped by node (no per-entry Python loop)."""

    def __init__(self, cluster: Cluster, victim_ents: IArr) -> None:
        self.nodes = cluster.e_node[victim_ents]
        self.slots = cluster.e_alloc[victim_ents]

    def get(self, node: int) -> list[int]:
        lo, hi = np.searchsorted(self.nodes, [node, node + 1])
        return [int(x) for x in self.slots[lo:hi]]


def _per_node_victims(view: RequestView, ordered: IArr, freed: FArr) -> IArr:
    """Every candidate off each node, then give back, most important first, what still fits.
    ``ordered`` is grouped by node: round j gives back (or keeps) each node's j-th candidate."""
    cluster = view.cluster
    if not len(ordered):
        return ordered
    nodes = cluster.e_node[ordered]
    starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
    runs = np.diff(np.r_[starts, len(ordered)])
    idx = view.need_idx.tolist()
    need = view.need
    remaining = {r: view.free[:, r] + freed[:, r] for r in idx}
    victim = np.zeros(len(ordered), dtype=bool)
    for j in range(int(runs.max())):
        sel = starts[runs > j] + j
        nd = nodes[sel]
        ents = ordered[sel]
        if view.exclusive:
            ok = np.zeros(len(sel), dtype=bool)
        else:
            ok = np.ones(len(sel), dtype=bool)
            backs = {r: cluster.e_res[ents, r] for r in idx}
            for r in idx:
                ok &= remaining[r][nd] - backs[r] + EPS >= need[r]
            for r in idx:
                remaining[r][nd[ok]] -= backs[r][ok]
        victim[sel[~ok]] = True
    result: IArr = ordered[victim]
    return result


def _set_key(cluster: Cluster, victims: list[int], start: FArr, newest: bool) -> tuple[float, ...]:
    if not victims:
        return (-1.0, 0.0, 0.0, 0.0)
    prio = cluster.a_prio[victims]
    top = int(prio.max())
    earliest = float(start[[v for v in victims if cluster.a_prio[v] == top]].min())
    return (float(top), float(len(victims)), float(prio.sum()), -earliest if newest else earliest)


def _node_victims_after(view: RequestView, node: int, ordered: IArr, gone: set[int]) -> list[int] | None:
    """The per-node procedure again, for a node some of whose candidates already left."""
    cluster = view.cluster
    fresh = [int(cluster.e_alloc[e]) for e in ordered[cluster.e_node[ordered] == node]
             if int(cluster.e_alloc[e]) not in gone]
    gone_here = [s for s in gone if any(cluster.e_node[e] == node for e in cluster.a_entries[s])]
    if not view.qualifies(node, gone_here + fresh):
        return None
    victims = list(fresh)
    for s in fresh:  # ``ordered`` is most important first
        trial = [x for x in victims if x != s]
        if view.qualifies(node, gone_here + trial):
            victims = trial
    return victims


def _pick_nodes(view: RequestView, g: int, potential: BArr, keys: dict[str, FArr],
                per_node: _NodeVictims, ordered: IArr, start: FArr,
                newest: bool) -> tuple[list[int], list[int]] | None:
    cluster = view.cluster
    keys = {k: v.copy() for k, v in keys.items()}
    free_nodes = view.base_ok | (view.kind == 2)
    for name in ("top",):
        keys[name][free_nodes] = -1.0
    for name in ("count", "sum", "start"):
        keys[name][free_nodes] = 0.0
    allowed = (potential | free_nodes) & (view.group == g)
    local: dict[int, list[int]] = {}
    left = dict(view.lend_limit)
    chosen: list[int] = []
    gone: set[int] = set()
    for _ in range(view.k):
        node = _best_node(keys, allowed)
        if node is None:
            return None
        allowed[node] = False
        if view.kind[node] == 2:
            lender = int(cluster.node_vc[node])
            if left.get(lender, 0) <= 0:
                continue
            left[lender] -= 1
        chosen.append(node)
        here = local[node] if node in local else per_node.get(node)
        new = [s for s in here if s not in gone] if not free_nodes[node] else []
        gone.update(new)
        affected = {int(cluster.e_node[e]) for s in new for e in cluster.a_entries[s]}
        for other in affected:
            if other in chosen or not allowed[other] or free_nodes[other]:
                continue
            victims = _node_victims_after(view, other, ordered, gone)
            if victims is None:
                allowed[other] = False
                continue
            local[other] = victims
            k = _set_key(cluster, victims, start, newest)
            keys["top"][other], keys["count"][other], keys["sum"][other], keys["start"][other] = k
    if len(chosen) < view.k:
        return None
    # Give back, most important first, every victim no longer needed on any placement.
    imp = sorted(gone, key=lambda s: (-int(cluster.a_prio[s]), float(start[s]) if newest else -float(start[s]),
                                      int(cluster.id_rank()[s])))
    return chosen, give_back(view, imp)


