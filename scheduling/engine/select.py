"""Choosing victims among eligible candidates (slots of the snapshot).

- class_cost: the cheapest feasible set (best set). Single-node requests are
  exact at any size: the best single victim is found with array operations and
  only nodes whose two cheapest candidates could beat it are searched exactly.
  Several nodes: exact branch and bound up to 20 candidates, else node-by-node
  greedy then trimming.
- priority: per node, take every candidate off and give back the most
  important first; pick nodes by the node rule.
- queue, rank, fair_share: the literal ordered greedy walk, computed per node
  from a cached walk order so no decision re-sorts all allocations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .placement import FitCounter, RequestView

COST_EPS = 1e-6
EXACT_LIMIT = 20
# Above EXACT_LIMIT eligible candidates, single-node requests search this many best-bounded nodes.
HEURISTIC_NODES = 16
# Ordered walks first look at this many candidates, then four times more, until the request fits.
PREFIX_START = 1024
# Search steps before the exact search settles for what it has found (>20 candidates only).
STEP_BUDGET = 200_000


@dataclass(slots=True)
class Selection:
    victims: list[int] | None
    code: str | None = None  # failure code when victims is None
    skipped: set[int] = field(default_factory=set)  # rank: skipped by the never-below rule


def pool_entries(view: RequestView, pool: BArr) -> IArr:
    """Live entries of pool slots on placeable nodes that do not already fit, and that free some
    resource the request needs: any other victim is always given back and never in a cheapest
    set, so it cannot change a selection (an exclusive request, which needs every occupant gone,
    keeps them all)."""
    cluster = view.cluster
    live = cluster.live_entries()
    slots, nodes = cluster.e_alloc[live], cluster.e_node[live]
    keep = pool[slots] & view.placeable[nodes] & ~view.base_ok[nodes]
    if not view.exclusive and len(view.need_idx):
        keep &= _frees_needed(view)
    result: IArr = live[keep]
    return result


def _frees_needed(view: RequestView) -> BArr:
    cluster = view.cluster
    key = ("frees", tuple(view.need_idx.tolist()))

    def build() -> BArr:
        live = cluster.live_entries()
        result: BArr = np.any(cluster.e_res[live][:, view.need_idx] > 0, axis=1)
        return result

    result: BArr = cluster.cached(key, build)
    return result


def _node_sums(view: RequestView, ents: IArr) -> tuple[FArr, IArr]:
    cluster = view.cluster
    n = len(cluster.node_names)
    nodes = cluster.e_node[ents]
    freed = np.zeros((n, len(cluster.res_names)))
    for r in view.need_idx.tolist():
        freed[:, r] = np.bincount(nodes, weights=cluster.e_res[ents, r], minlength=n)
    return freed, np.bincount(nodes, minlength=n)


def potential_nodes(view: RequestView, ents: IArr) -> tuple[BArr, FArr]:
    """Nodes where removing every pool entry would make the request fit."""
    cluster = view.cluster
    freed, count = _node_sums(view, ents)
    ok = view.placeable & ~view.base_ok
    idx = view.need_idx
    if len(idx):
        ok &= np.all(view.free[:, idx] + freed[:, idx] + EPS >= view.need[idx], axis=1)
    if view.exclusive:
        ok &= count == cluster.count
    return ok, freed


def feasible_with_all(view: RequestView, potential: BArr) -> bool:
    counts = view.base_count + view.lendable_cap
    extra = np.bincount(view.group[potential], minlength=len(counts))
    return bool(np.any(counts + extra[: len(counts)] >= view.k))


def _better(cost: float, victims: Sequence[int], best: _Best, start: FArr, rank: IArr) -> bool:
    if best.victims is None:
        return True
    if cost < best.cost - COST_EPS:
        return True
    if cost > best.cost + COST_EPS:
        return False
    if len(victims) != len(best.victims):
        return len(victims) < len(best.victims)
    mine = float(start[list(victims)].min())
    theirs = float(start[best.victims].min())
    if abs(mine - theirs) > EPS:
        return mine > theirs
    ids = [int(x) for x in sorted(rank[list(victims)])]
    return ids < [int(x) for x in sorted(rank[best.victims])]


@dataclass(slots=True)
class _Best:
    victims: list[int] | None = None
    cost: float = 0.0
    steps: int = 0


def _search(items: list[int], cost: FArr, bound: int | None, best: _Best, start: FArr, rank: IArr,
            fits: Callable[[list[int]], bool]) -> None:
    """Branch and bound over subsets of ``items``, keeping the best feasible set."""
    n = len(items)
    costs = [float(cost[s]) for s in items]

    def dfs(i: int, chosen: list[int], total: float) -> None:
        best.steps += 1
        if chosen and fits(chosen):
            if _better(total, chosen, best, start, rank):
                best.victims, best.cost = list(chosen), total
            return
        if i == n or (bound is not None and len(chosen) >= bound) or best.steps > STEP_BUDGET:
            return
        if not fits(chosen + items[i:]):
            return
        t = total + costs[i]
        if best.victims is None or (t < best.cost + COST_EPS
                                    and not (t > best.cost - COST_EPS and len(chosen) + 1 > len(best.victims))):
            chosen.append(items[i])
            dfs(i + 1, chosen, t)
            chosen.pop()
        dfs(i + 1, chosen, total)

    dfs(0, [], 0.0)


def _by_cost(slots: Sequence[int], cost: FArr, start: FArr, rank: IArr) -> list[int]:
    return sorted(slots, key=lambda s: (float(cost[s]), -float(start[s]), int(rank[s])))


def _node_fit(view: RequestView, node: int, slots: Sequence[int] = ()) -> Callable[[list[int]], bool]:
    """Fit on one node, with each candidate's freed amounts precomputed (plain floats: hot loop)."""
    cluster = view.cluster
    idx = view.need_idx.tolist()
    deficit = [float(view.need[r] - view.free[node, r]) - EPS for r in idx]
    freed: dict[int, list[float]] = {}
    for s in slots:
        amounts = [0.0] * len(idx)
        for e in cluster.a_entries[s]:
            if cluster.e_node[e] == node:
                row = cluster.e_res[e]
                for j, r in enumerate(idx):
                    amounts[j] += float(row[r])
        freed[s] = amounts
    occupants = int(cluster.count[node])
    exclusive = view.exclusive

    def fits(victims: list[int]) -> bool:
        if exclusive and len(victims) != occupants:
            return view.qualifies(node, victims)
        for j, d in enumerate(deficit):
            total = 0.0
            for v in victims:
                total += freed[v][j] if v in freed else 0.0
            if total < d:
                return False
        return True

    return fits


# -- class_cost -------------------------------------------------------------------------

def select_class_cost(view: RequestView, pool: BArr, cost: FArr, start: FArr, bound: int | None,
                      value: float | None, cost_key: tuple[float, float]) -> Selection:
    ents = pool_entries(view, pool)
    potential, _ = potential_nodes(view, ents)
    if not len(ents) or not feasible_with_all(view, potential):
        return Selection(None, "NO_FEASIBLE_SET")
    rank = view.cluster.id_rank()
    eligible = int(pool.sum())  # the contract's "at most 20 eligible" is about this count
    if view.k == 1:
        best = _best_single_node(view, ents, potential, cost, start, rank, bound, cost_key, eligible)
    else:
        best = _Best()
        if eligible <= EXACT_LIMIT:
            slots = np.unique(view.cluster.e_alloc[ents]).tolist()
            _search(_by_cost(slots, cost, start, rank), cost, bound, best, start, rank, view.feasible)
        if best.victims is None and (eligible > EXACT_LIMIT or best.steps > STEP_BUDGET):
            best = _greedy_by_node(view, ents, potential, cost, start, rank, bound)
    if best.victims is None:
        return Selection(None, "EXCEEDS_MAX_VICTIMS")
    if value is not None and not best.cost < value - COST_EPS:
        return Selection(None, "COST_EXCEEDS_VALUE")
    return Selection(sorted(best.victims))


def _entry_mask(cluster: Cluster, ents: IArr) -> BArr:
    mask = np.zeros(len(cluster.e_alloc), dtype=bool)
    mask[ents] = True
    return mask


def _cost_order(view: RequestView, cost: FArr, key: tuple[float, float]) -> IArr:
    """Live entries grouped by node, cheapest first (cached: cost depends on the snapshot only)."""
    cluster = view.cluster
    live = cluster.live_entries()

    def build() -> IArr:
        order = np.lexsort((cost[cluster.e_alloc[live]], cluster.e_node[live]))
        result: IArr = live[order]
        return result

    result: IArr = cluster.cached(("cost_order", *key), build)
    return result


def _best_single_node(view: RequestView, ents: IArr, potential: BArr, cost: FArr, start: FArr, rank: IArr,
                      bound: int | None, cost_key: tuple[float, float], eligible: int) -> _Best:
    cluster = view.cluster
    best = _Best()
    if bound is not None and bound < 1:
        return best
    slots = cluster.e_alloc[ents]
    single = _single_victim_entries(view, ents, potential)
    if single.any():
        s = np.unique(slots[single])
        c = cost[s]
        tied = s[c <= c.min() + COST_EPS]
        pick = min(tied.tolist(), key=lambda x: (float(cost[x]), -float(start[x]), int(rank[x])))
        best.victims, best.cost = [pick], float(cost[pick])
    if bound is not None and bound < 2:
        return best
    # A node needing m victims costs at least its m cheapest candidates (m: fewest that could
    # free enough, taking the largest first). Exact when few are eligible; above EXACT_LIMIT the
    # contract allows a heuristic: search only the most promising nodes.
    lower, fewest = _lower_bounds(view, ents, potential, cost, cost_key)
    candidates = np.flatnonzero(np.isfinite(lower) & (fewest >= 2))
    order = candidates[np.lexsort((fewest[candidates], lower[candidates]))]
    if eligible > EXACT_LIMIT:
        order = order[:HEURISTIC_NODES]
    nodes_of = cluster.e_node[ents]
    for node in order.tolist():
        if best.victims is not None and (lower[node] > best.cost + COST_EPS or (
                lower[node] > best.cost - COST_EPS and fewest[node] > len(best.victims))):
            break
        if bound is not None and fewest[node] > bound:
            continue
        local = np.unique(slots[nodes_of == node]).tolist()
        best.steps = 0
        _search(_by_cost(local, cost, start, rank), cost, bound, best, start, rank,
                _node_fit(view, node, local))
    return best


def _single_victim_entries(view: RequestView, ents: IArr, potential: BArr) -> BArr:
    """Entries whose allocation alone would make its node fit."""
    cluster = view.cluster
    nodes = cluster.e_node[ents]
    idx = view.need_idx
    single: BArr = potential[nodes].copy()
    if len(idx):
        single &= np.all(view.free[nodes][:, idx] + cluster.e_res[ents][:, idx] + EPS >= view.need[idx], axis=1)
    if view.exclusive:
        single &= cluster.count[nodes] == 1
    return single


def _lower_bounds(view: RequestView, ents: IArr, potential: BArr, cost: FArr,
                  cost_key: tuple[float, float]) -> tuple[FArr, IArr]:
    """Per node: the fewest victims that could make it fit, and the sum of that many cheapest costs."""
    cluster = view.cluster
    n = len(cluster.node_names)
    mask = _entry_mask(cluster, ents)
    fewest = np.zeros(n, dtype=np.int64)
    for r in view.need_idx.tolist():
        e = ents[np.lexsort((-cluster.e_res[ents, r], cluster.e_node[ents]))]
        nodes = cluster.e_node[e]
        first = np.r_[True, nodes[1:] != nodes[:-1]] if len(nodes) else np.zeros(0, dtype=bool)
        seg = np.cumsum(first) - 1
        cum = np.cumsum(cluster.e_res[e, r])
        within = cum - np.r_[0.0, cum][np.flatnonzero(first)][seg]
        deficit = view.need[r] - view.free[nodes, r] - EPS
        enough = within >= deficit
        pos = np.arange(len(e)) - np.flatnonzero(first)[seg] + 1
        need_r = np.full(n, np.iinfo(np.int64).max)
        np.minimum.at(need_r, nodes[enough], pos[enough])
        fewest = np.maximum(fewest, need_r)
    if view.exclusive:
        fewest = np.maximum(fewest, cluster.count)
    order = _cost_order(view, cost, cost_key)
    ordered = order[mask[order]]
    onode = cluster.e_node[ordered]
    first = np.r_[True, onode[1:] != onode[:-1]] if len(onode) else np.zeros(0, dtype=bool)
    seg = np.cumsum(first) - 1
    cum = np.cumsum(cost[cluster.e_alloc[ordered]])
    within = cum - np.r_[0.0, cum][np.flatnonzero(first)][seg]
    pos = np.arange(len(ordered)) - np.flatnonzero(first)[seg] + 1
    lower = np.full(n, np.inf)
    hit = pos == fewest[onode]
    lower[onode[hit]] = within[hit]
    lower[~potential] = np.inf
    return lower, fewest


def _greedy_by_node(view: RequestView, ents: IArr, potential: BArr, cost: FArr, start: FArr, rank: IArr,
                    bound: int | None) -> _Best:
    """Heuristic for many candidates: free the cheapest nodes, then trim what is not needed."""
    cluster = view.cluster
    nodes = cluster.e_node[ents]
    slots = cluster.e_alloc[ents]
    single = _single_victim_entries(view, ents, potential)
    n = len(cluster.node_names)
    whole = np.bincount(nodes, weights=cost[slots], minlength=n)  # every candidate on the node
    local = np.where(potential, whole, np.inf)
    single_cost = np.full(n, np.inf)
    np.minimum.at(single_cost, nodes[single], cost[slots[single]])
    local = np.minimum(local, single_cost)
    best = _Best()
    for g in view.groups.tolist():
        want = view.k - int(view.base_count[g]) - int(view.lendable_cap[g])
        cand = np.flatnonzero(potential & (view.group == g))
        if want <= 0 or len(cand) < want:
            continue
        chosen = cand[np.argsort(local[cand], kind="stable")[:want]]
        victims: set[int] = set()
        for node in chosen.tolist():
            here = nodes == node
            on_slots = slots[here]
            if single_cost[node] <= local[node]:
                cheapest = on_slots[single[here] & (cost[on_slots] <= single_cost[node] + COST_EPS)]
                victims.add(int(cheapest[0]))
            else:
                victims.update(int(x) for x in on_slots)
        trimmed = _trim(view, sorted(victims, key=lambda s: (-float(cost[s]), -int(rank[s]))))
        if bound is not None and len(trimmed) > bound:
            continue
        total = float(cost[trimmed].sum())
        if _better(total, trimmed, best, start, rank):
            best.victims, best.cost = trimmed, total
    return best


def _trim(view: RequestView, victims: list[int]) -> list[int]:
    """Give back, in the given order, every victim the request does not need."""
    counter = FitCounter(view, victims)
    kept = []
    for s in victims:
        counter.remove(s)
        if not counter.fits():
            counter.add(s)
            kept.append(s)
    return sorted(kept)


# -- priority ----------------------------------------------------------------------------

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


def _node_keys(view: RequestView, victim_ents: IArr, start: FArr, newest: bool) -> dict[str, FArr]:
    cluster = view.cluster
    n = len(cluster.node_names)
    nodes = cluster.e_node[victim_ents]
    slots = cluster.e_alloc[victim_ents]
    prio = cluster.a_prio[slots].astype(float)
    top = np.full(n, -1.0)
    np.maximum.at(top, nodes, prio)
    count = np.bincount(nodes, minlength=n).astype(float)
    total = np.bincount(nodes, weights=prio, minlength=n)
    at_top = prio == top[nodes]
    earliest = np.full(n, np.inf)
    np.minimum.at(earliest, nodes[at_top], start[slots[at_top]])
    earliest[count == 0] = 0.0
    return {"top": top, "count": count, "sum": total, "start": -earliest if newest else earliest}


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
    ents = pool_entries(view, pool)
    potential, freed = potential_nodes(view, ents)
    if not len(ents) or not feasible_with_all(view, potential):
        return Selection(None, "NO_FEASIBLE_SET")
    order = _importance_order(view, start, newest, now)
    ordered = order[_entry_mask(cluster, ents)[order] & potential[cluster.e_node[order]]]
    victim_ents = _per_node_victims(view, ordered, freed)
    keys = _node_keys(view, victim_ents, start, newest)
    per_node = _NodeVictims(cluster, victim_ents)
    if view.k == 1:
        allowed = potential.copy()
        if bound is not None:
            allowed &= keys["count"] <= bound
        node = _best_node(keys, allowed)
        if node is None:
            return Selection(None, "EXCEEDS_MAX_VICTIMS")
        return Selection(sorted(per_node.get(node)))
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
    """Every candidate off each node, then give back, most important first, what still fits."""
    cluster = view.cluster
    if not len(ordered):
        return ordered
    nodes = cluster.e_node[ordered]
    first = np.r_[True, nodes[1:] != nodes[:-1]]
    pos = np.arange(len(ordered))
    rank_in = pos - np.maximum.accumulate(np.where(first, pos, 0))
    idx = view.need_idx
    remaining = view.free + freed
    victim = np.zeros(len(ordered), dtype=bool)
    for j in range(int(rank_in.max()) + 1):
        sel = np.flatnonzero(rank_in == j)
        nd = nodes[sel]
        back = cluster.e_res[ordered[sel]]
        if view.exclusive:
            ok = np.zeros(len(sel), dtype=bool)
        elif len(idx):
            ok = np.all(remaining[nd][:, idx] - back[:, idx] + EPS >= view.need[idx], axis=1)
        else:
            ok = np.ones(len(sel), dtype=bool)
        remaining[nd[ok]] -= back[ok]
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
    counter = FitCounter(view, imp)
    kept = []
    for s in imp:
        counter.remove(s)
        if not counter.fits():
            counter.add(s)
            kept.append(s)
    return chosen, sorted(kept)


# -- queue, rank, fair_share: ordered greedy ----------------------------------------------

def ordered_greedy(view: RequestView, pool: BArr, walk: tuple[IArr, IArr, IArr], bound: int | None,
                   takes: Callable[[IArr], BArr] | None = None) -> Selection:
    """Walk ``pool`` in walk order taking each candidate until the request fits, then give
    back from the last to the first every victim not needed. ``walk`` is (position per
    slot, slots in order, live entries grouped by node in walk order), cached per snapshot.
    ``takes`` decides, for the ordered pool, which candidates the walk takes (rank)."""
    cluster = view.cluster
    pos, order, entry_order = walk
    ordered_slots = order[pool[order]]
    # The walk stops where the request first fits, and whether a candidate is taken depends
    # only on those before it: walk a growing prefix until it fits (or the pool is exhausted).
    size = PREFIX_START
    while True:
        prefix = ordered_slots[:size]
        took = takes(prefix) if takes is not None else np.ones(len(prefix), dtype=bool)
        taken_mask = np.zeros(cluster.slots, dtype=bool)
        taken_mask[prefix[took]] = True
        skipped_slots = prefix[~took]
        ents = pool_entries(view, taken_mask)
        in_pool = np.zeros(len(cluster.e_alloc), dtype=bool)
        in_pool[ents] = True
        fit_pos = _fit_positions(view, entry_order[in_pool[entry_order]], pos)
        best_p: int | None = None
        for g in view.groups.tolist():
            want = view.k - int(view.base_count[g]) - int(view.lendable_cap[g])
            cand = fit_pos[(view.group == g) & (fit_pos >= 0)]
            if want <= 0 or len(cand) < want:
                continue
            p = int(np.partition(cand, want - 1)[want - 1])
            if best_p is None or p < best_p:
                best_p = p
        if best_p is not None or size >= len(ordered_slots):
            break
        size *= 4
    if best_p is None:
        return Selection(None, "NO_FEASIBLE_SET", set(skipped_slots.tolist()))
    reached = set(skipped_slots[pos[skipped_slots] < best_p].tolist())
    relevant_nodes = (fit_pos >= 0) & (fit_pos <= best_p)
    e_slots = cluster.e_alloc[ents]
    near = relevant_nodes[cluster.e_node[ents]] & (pos[e_slots] <= best_p)
    relevant = np.unique(e_slots[near])
    walk_back = relevant[np.argsort(-pos[relevant], kind="stable")].tolist()
    counter = FitCounter(view, walk_back)
    kept = []
    for s in walk_back:
        counter.remove(s)
        if not counter.fits():
            counter.add(s)
            kept.append(s)
    if bound is not None and len(kept) > bound:
        return Selection(None, "EXCEEDS_MAX_VICTIMS", reached)
    return Selection(sorted(kept), None, reached)


def _fit_positions(view: RequestView, ents: IArr, pos: IArr) -> IArr:
    """Per node: the walk position at which taking candidates in order makes it fit (-1: never).
    ``ents`` are grouped by node and in walk order within a node."""
    cluster = view.cluster
    n = len(cluster.node_names)
    out = np.full(n, -1, dtype=np.int64)
    if not len(ents):
        return out
    nodes = cluster.e_node[ents]
    epos = pos[cluster.e_alloc[ents]]
    first = np.r_[True, nodes[1:] != nodes[:-1]]
    idx = view.need_idx
    fits = np.ones(len(ents), dtype=bool)
    seg_id = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    for r in idx.tolist():
        cum = np.cumsum(cluster.e_res[ents, r])
        base = np.r_[0.0, cum][starts][seg_id]
        fits &= view.free[nodes, r] + (cum - base) + EPS >= view.need[r]
    if view.exclusive:
        k = np.arange(len(ents)) - starts[seg_id] + 1
        fits &= k == cluster.count[nodes]
    hit = np.flatnonzero(fits)
    if not len(hit):
        return out
    first_hit = hit[np.r_[True, nodes[hit][1:] != nodes[hit][:-1]]]
    out[nodes[first_hit]] = epos[first_hit]
    return out


def rank_takes(cluster: Cluster, reclaim_any: BArr) -> Callable[[IArr], BArr]:
    """Rank's walk: a victim is skipped when its tenant would fall below its fair share
    once it and the tenant's victims taken before it are gone."""
    mask = cluster.total > 0

    def takes(ordered: IArr) -> BArr:
        out = np.ones(len(ordered), dtype=bool)
        tenants = cluster.a_tenant[ordered]
        exempt = reclaim_any[ordered]
        for t in np.unique(tenants[~exempt]).tolist():
            idx = np.flatnonzero((tenants == t) & ~exempt)
            items = cluster.a_held[ordered[idx]][:, mask]
            fair = float(cluster.t_fair[t])
            if not mask.any():
                out[idx] = fair - EPS <= 0.0
                continue
            slack = cluster.t_used[t][mask] - (fair - EPS) * cluster.total[mask]
            out[idx] = _first_fit(items, slack)
        return out

    return takes


def _first_fit(items: FArr, slack: FArr) -> BArr:
    """Sequential rule, vectorized: take an item when some resource keeps non-negative slack."""
    m = len(items)
    taken = np.zeros(m, dtype=bool)
    start = 0
    slack = slack.copy()
    tol = 1e-9
    while start < m:
        rest = items[start:]
        cidx = np.flatnonzero(np.any(rest <= slack + tol, axis=1)) + start
        if not len(cidx):
            break
        chunk = items[cidx]
        cum = np.cumsum(chunk, axis=0)
        before = cum - chunk
        ok = np.any(chunk <= slack - before + tol, axis=1)
        bad = np.flatnonzero(~ok)
        f = int(bad[0]) if len(bad) else len(cidx)
        taken[cidx[:f]] = True
        if f:
            slack = slack - cum[f - 1]
        if f == len(cidx):
            break
        start = int(cidx[f]) + 1
    return taken
