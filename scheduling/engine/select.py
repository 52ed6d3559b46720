"""Choosing victims among eligible candidates: best set, per-node priority, ordered greedy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .cluster import EPS
from .eligibility import start_of
from .model import Allocation
from .placement import LENDABLE, RequestView

COST_EPS = 1e-6
EXACT_LIMIT = 20
# Search steps before the exact best-set search settles for what it has found.
STEP_BUDGET = 200_000


@dataclass(slots=True)
class Selection:
    victims: list[Allocation] | None
    code: str | None = None  # failure code when victims is None
    skipped: set[str] = field(default_factory=set)  # rank: skipped by the never-below rule


# -- class_cost: best set -------------------------------------------------------

@dataclass(slots=True)
class _Best:
    victims: list[Allocation] | None = None
    cost: float = 0.0
    steps: int = 0


def _better(cost: float, victims: Sequence[Allocation], best: _Best, now: float) -> bool:
    if best.victims is None:
        return True
    if cost < best.cost - COST_EPS:
        return True
    if cost > best.cost + COST_EPS:
        return False
    if len(victims) != len(best.victims):
        return len(victims) < len(best.victims)
    mine = min(start_of(a, now) for a in victims)
    theirs = min(start_of(a, now) for a in best.victims)
    if abs(mine - theirs) > EPS:
        return mine > theirs
    return sorted(a.id for a in victims) < sorted(a.id for a in best.victims)


def _search(items: list[Allocation], costs: dict[str, float], bound: int | None, best: _Best,
            now: float, fits: Callable[[list[Allocation]], bool]) -> None:
    """Branch and bound over subsets of ``items`` (sorted by cost), keeping the best feasible."""
    n = len(items)

    def dfs(i: int, chosen: list[Allocation], total: float) -> None:
        best.steps += 1
        if chosen and fits(chosen):
            if _better(total, chosen, best, now):
                best.victims, best.cost = list(chosen), total
            return
        if i == n or (bound is not None and len(chosen) >= bound) or best.steps > STEP_BUDGET:
            return
        if not fits(chosen + items[i:]):
            return
        c = costs[items[i].id]
        t = total + c
        if best.victims is None or t < best.cost + COST_EPS and not (
            t > best.cost - COST_EPS and len(chosen) + 1 > len(best.victims)
        ):
            chosen.append(items[i])
            dfs(i + 1, chosen, t)
            chosen.pop()
        dfs(i + 1, chosen, total)

    dfs(0, [], 0.0)


def _by_cost(pool: Sequence[Allocation], costs: dict[str, float], now: float) -> list[Allocation]:
    return sorted(pool, key=lambda a: (costs[a.id], -start_of(a, now), a.id))


def _on_node(view: RequestView, pool: Sequence[Allocation]) -> dict[str, list[Allocation]]:
    per: dict[str, list[Allocation]] = {}
    for a in pool:
        for name in a.placement:
            kd = view.kind.get(name)
            if kd is not None and kd != LENDABLE:
                per.setdefault(name, []).append(a)
    return per


def _node_fit(view: RequestView, name: str) -> Callable[[list[Allocation]], bool]:
    def fits(victims: list[Allocation]) -> bool:
        return view.qualifies(name, victims)

    return fits


def best_cost_set(view: RequestView, pool: Sequence[Allocation], costs: dict[str, float],
                  bound: int | None, now: float) -> _Best:
    """The cheapest feasible set within ``bound`` (exact up to EXACT_LIMIT candidates)."""
    best = _Best()
    if view.k == 1:
        # A single-node request only ever needs victims on the node it lands on.
        for name, local in sorted(_on_node(view, pool).items()):
            if name in view.base_ok:
                continue
            best.steps = 0
            _search(_by_cost(local, costs, now), costs, bound, best, now, _node_fit(view, name))
        return best
    if len(pool) <= EXACT_LIMIT:
        _search(_by_cost(pool, costs, now), costs, bound, best, now, view.feasible)
        if best.steps <= STEP_BUDGET:
            return best
    heuristic = _greedy_by_node(view, pool, costs, bound, now)
    if heuristic.victims is not None and _better(heuristic.cost, heuristic.victims, best, now):
        return heuristic
    return best


def _greedy_by_node(view: RequestView, pool: Sequence[Allocation], costs: dict[str, float],
                    bound: int | None, now: float) -> _Best:
    """Heuristic for many candidates: free the cheapest nodes one by one, then trim."""
    local: list[tuple[float, str, list[Allocation]]] = []
    for name, cands in _on_node(view, pool).items():
        if name in view.base_ok:
            continue
        nb = _Best()
        _search(_by_cost(cands, costs, now)[:12], costs, None, nb, now, _node_fit(view, name))
        if nb.victims is not None:
            local.append((nb.cost, name, nb.victims))
    local.sort(key=lambda t: (t[0], t[1]))
    taken: dict[str, Allocation] = {}
    for _, _, victims in local:
        for a in victims:
            taken[a.id] = a
        if view.feasible(list(taken.values())):
            break
    else:
        return _Best()
    chosen = sorted(taken.values(), key=lambda a: (-costs[a.id], a.id))
    for a in list(chosen):
        trial = [x for x in chosen if x is not a]
        if trial and view.feasible(trial):
            chosen = trial
    if bound is not None and len(chosen) > bound:
        return _Best()
    return _Best(victims=chosen, cost=sum(costs[a.id] for a in chosen))


def select_class_cost(view: RequestView, pool: Sequence[Allocation], costs: dict[str, float],
                      bound: int | None, value: float | None, now: float) -> Selection:
    if not pool or not view.feasible(pool):
        return Selection(None, "NO_FEASIBLE_SET")
    best = best_cost_set(view, pool, costs, bound, now)
    if best.victims is None:
        return Selection(None, "EXCEEDS_MAX_VICTIMS")
    if value is not None and not best.cost < value - COST_EPS:
        return Selection(None, "COST_EXCEEDS_VALUE")
    return Selection(sorted(best.victims, key=lambda a: a.id))


# -- priority: per-node minimal victims -----------------------------------------

def _importance(a: Allocation, now: float, newest: bool) -> tuple[int, float, str]:
    start = start_of(a, now)
    return (-a.priority, start if newest else -start, a.id)


def _node_victims(view: RequestView, name: str, local: list[Allocation], gone: list[Allocation],
                  now: float, newest: bool) -> list[Allocation] | None:
    gone_ids = {a.id for a in gone}
    fresh = [a for a in local if a.id not in gone_ids]
    if not view.qualifies(name, gone + fresh):
        return None
    victims = list(fresh)
    for a in sorted(fresh, key=lambda x: _importance(x, now, newest)):
        trial = [x for x in victims if x is not a]
        if view.qualifies(name, gone + trial):
            victims = trial
    return victims


def _victim_key(victims: list[Allocation], now: float, newest: bool) -> tuple[float, ...]:
    if not victims:
        return (-1.0, 0.0, 0.0, 0.0)
    top = max(a.priority for a in victims)
    earliest = min(start_of(a, now) for a in victims if a.priority == top)
    return (float(top), float(len(victims)), float(sum(a.priority for a in victims)),
            -earliest if newest else earliest)


def select_priority(view: RequestView, pool: Sequence[Allocation], bound: int | None,
                    now: float, newest: bool) -> Selection:
    if not pool or not view.feasible(pool):
        return Selection(None, "NO_FEASIBLE_SET")
    per_node = _on_node(view, pool)
    best: tuple[tuple[float, ...], list[str], list[Allocation]] | None = None
    over_bound = False
    for _group, names in sorted(view.groups.items()):
        picked = _pick_nodes(view, names, per_node, now, newest)
        if picked is None:
            continue
        chosen, victims = picked
        if bound is not None and len(victims) > bound:
            over_bound = True
            continue
        key = _victim_key(victims, now, newest)
        if best is None or (key, sorted(chosen)) < (best[0], best[1]):
            best = (key, sorted(chosen), victims)
    if best is None:
        return Selection(None, "EXCEEDS_MAX_VICTIMS" if over_bound else "NO_FEASIBLE_SET")
    return Selection(sorted(best[2], key=lambda a: a.id))


def _pick_nodes(view: RequestView, names: list[str], per_node: dict[str, list[Allocation]],
                now: float, newest: bool) -> tuple[list[str], list[Allocation]] | None:
    chosen: list[str] = []
    gone: list[Allocation] = []
    left = dict(view.lend_limit)
    if view.k == 1:
        # Every node is judged on its own; keep the best.
        best: tuple[tuple[float, ...], str, list[Allocation]] | None = None
        for name in names:
            if view.kind[name] == LENDABLE:
                continue
            victims = _node_victims(view, name, per_node.get(name, []), [], now, newest)
            if victims is None:
                continue
            key = _victim_key(victims, now, newest)
            if best is None or (key, name) < (best[0], best[1]):
                best = (key, name, victims)
        return None if best is None else ([best[1]], best[2])
    for _ in range(view.k):
        step: tuple[tuple[float, ...], str, list[Allocation]] | None = None
        for name in names:
            if name in chosen:
                continue
            if view.kind[name] == LENDABLE:
                if left.get(view.lender_of[name], 0) <= 0:
                    continue
                found: list[Allocation] | None = []
            else:
                found = _node_victims(view, name, per_node.get(name, []), gone, now, newest)
            if found is None:
                continue
            key = _victim_key(found, now, newest)
            if step is None or (key, name) < (step[0], step[1]):
                step = (key, name, found)
        if step is None:
            return None
        chosen.append(step[1])
        if view.kind[step[1]] == LENDABLE:
            left[view.lender_of[step[1]]] -= 1
        gone.extend(step[2])
    # Give back, most important first, every victim no longer needed. Fit is checked on
    # any placement, not only the nodes picked: a gang victim may have freed others, and
    # the result must stay minimal (section 4.5). The reported nodes are placed afresh.
    victims = list(gone)
    for a in sorted(gone, key=lambda x: _importance(x, now, newest)):
        trial = [x for x in victims if x is not a]
        if trial and view.feasible(trial):
            victims = trial
    return chosen, victims


# -- queue, rank, fair_share: ordered greedy -------------------------------------

def ordered_greedy(view: RequestView, order: Sequence[Allocation], bound: int | None,
                   skip: Callable[[Allocation, list[Allocation]], bool] | None = None) -> Selection:
    taken: list[Allocation] = []
    skipped: set[str] = set()
    fitted = False
    for a in order:
        if skip is not None and skip(a, taken):
            skipped.add(a.id)
            continue
        taken.append(a)
        if view.feasible(taken):
            fitted = True
            break
    if not fitted:
        return Selection(None, "NO_FEASIBLE_SET", skipped)
    for a in reversed(list(taken)):
        trial = [x for x in taken if x is not a]
        if trial and view.feasible(trial):
            taken = trial
    if bound is not None and len(taken) > bound:
        return Selection(None, "EXCEEDS_MAX_VICTIMS", skipped)
    return Selection(sorted(taken, key=lambda x: x.id), None, skipped)
