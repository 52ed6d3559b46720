"""The incremental pass of the replay (``Simulation`` runs it unless told to be straightforward):
the same decisions as the straightforward pass, made only where a request could start.

The straightforward pass sorts the whole queue and asks the engine about each request in its
first 2,000 positions, at every event: about one ``decide`` per waiting request per event. This
one reads the queue from the order kept as requests come and go (``order``), and passes over a
request when the snapshot shows it can neither fit nor preempt (``prune``), which is exactly the
engine's "wait" (a wait changes nothing); once nothing pending fits anywhere and no later request
could preempt, the rest of the queue is not read. Decisions and their application are the
straightforward pass's own (``_decide`` calls the engine and the same ``_start``/``_preempt``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scheduling.engine import decide
from scheduling.engine import model as em
from scheduling.passes.ordering import reserve_free

EPS = 1e-9
ROOMLESS = ("NO_FEASIBLE_SET", "EXCEEDS_MAX_VICTIMS")  # the engine's waits for want of a victim set


class IncrementalPass:
    """Mixed into ``Simulation``: reads its state, applies through its ``_start`` and ``_preempt``."""

    def _pass_incremental(self, t: float) -> None:
        """The pass above, deciding only what could start (``prune``): the queue is read in order
        from the kept ``order``, a request that can neither fit nor preempt is passed over as the
        engine would tell it to wait, and the pass ends where no later request could start."""
        holders, bounds = self.holders, self.bounds
        bounds.borrowing = bool(self.borrowed)
        starving = self._starving(t)
        last = self.cluster.last_preemption_at
        backoff = (self.policy.kind == "fair_share" and last is not None
                   and t - last < self.policy.preemptive_scheduling_backoff_s - EPS)
        quiet = self._quiet(t, starving, backoff)
        if quiet and not holders:
            return  # nothing can start: every decision of this pass would be a wait
        for idx, names in holders.items():
            reserve_free(self.cluster, f"hold:{idx}", list(names), self.holds)
        key = self._order_key(t)
        waited: dict[tuple, tuple[int, int]] = {}
        for idx in sorted(holders, key=key):
            if self._all_started():
                break
            if quiet or self._awaits_victims(self.jobs[idx]):
                self._rereserve(idx)
            else:
                self._decide(self.jobs[idx], t, waited)
        if quiet:
            for idx in holders:
                self.cluster.remove(f"hold:{idx}")
            return
        self._read_queue(t, starving, backoff, waited)
        self._unreserve()
        self._track(t)

    def _read_queue(self, t: float, starving: dict[str, bool], backoff: bool,
                    waited: dict[tuple, tuple[int, int]]) -> None:
        """The queue past the holders, in order, up to the pass's budget: each request decided
        where it could start, passed over where it could not, until nothing later could."""
        holders, pending, jobs, bounds, watch, budget = (self.holders, self.pending, self.jobs, self.bounds,
                                                         self.watch, self.budget)
        cluster = self.cluster
        stamp = (cluster.version, cluster.state_version)  # moved only by a decision
        seen = 0
        for idx in self.order.ordered(self._tenant_key, budget + len(holders)):
            if watch is not None and not watch:
                break  # ``_all_started``
            if idx in holders or idx not in pending:
                continue
            seen += 1
            if seen > budget:
                break
            st = jobs[idx]
            if waited.get(st.wshape) == stamp:
                continue
            bounds.refresh(cluster, t)
            req, j = st.request(), st.job
            if bounds.fits(cluster, j.nodes, j.gpus, j.cpus) or bounds.may_preempt(
                    req, starving.get(j.tenant, False), backoff, room=st.wshape in self.roomless):
                self._decide(st, t, waited)
                cluster = self.cluster  # a loan rebuilds the snapshot
                stamp = (cluster.version, cluster.state_version)
            elif self._nothing_after(req, starving.get(j.tenant, False), backoff):
                break  # nothing fits, and every later request preempts no more than this one could
            else:  # the engine's answer is "wait", for every request alike in what these read
                waited[st.wshape] = stamp

    def _tenant_key(self, tenant: str) -> tuple:
        """In fair_share, the first terms of the queue's key (``queue_key``) for every request of
        ``tenant`` in this pass (its standing, read by the pass's ``_order_key``)."""
        starving, deficit = self.standing.get(tenant, (False, 0.0))
        return (0 if starving else 1, -deficit)

    def _all_started(self) -> bool:
        """Whether a forward replay's watched requests (``watch``) have all started: the rest of its
        last pass could change none of their first starts, so it is not decided."""
        return self.watch is not None and not self.watch

    def _rereserve(self, idx: int) -> None:
        """A holder told to wait without asking: its reservation released and made again, as the
        straightforward pass's decision leaves it. The engine breaks ties between equally good
        victim sets by its snapshot's slot order, so both passes must fill slots alike. Where
        that would give back the very same snapshot (one node, whose free capacity is still all
        the reservation's, and sums that come back exactly), it is left as it is."""
        if self._same_again(f"hold:{idx}"):
            return
        self.cluster.remove(f"hold:{idx}")
        reserve_free(self.cluster, f"hold:{idx}", list(self.holders[idx]), self.holds)

    def _same_again(self, key: str) -> bool:
        """Whether removing the reservation ``key`` and making it again would leave every array of
        the snapshot as it is: it holds one node (its slot and entry come back off the free lists
        in the same place), and what it would reserve now is what it holds, to the last bit."""
        cluster = self.cluster
        slot = cluster.slot_of.get(key)
        if slot is None:
            return False
        entries = cluster.a_entries[slot]
        if len(entries) != 1:
            return False
        e = entries[0]
        node = int(cluster.e_node[e])
        # Element by element in Python floats (a few resources): the same as the arrays' operations.
        rows = zip(cluster.e_res[e].tolist(), cluster.used[node].tolist(), cluster.cap[node].tolist(),
                   cluster.t_used[cluster.a_tenant[slot]].tolist(), cluster.a_held[slot].tolist(), strict=True)
        for held, used, cap, tenant_used, tenant_held in rows:
            without = used - held
            free = cap - without
            again = free if free > 0 else 0.0
            if not (again == held and without + held == used and (tenant_used - tenant_held) + again == tenant_used):
                return False
        return True

    def _starving(self, t: float) -> dict[str, bool]:
        if self.policy.kind != "fair_share":
            return {}
        timeout = self.policy.starvation_timeout_s
        out = {}
        for name in self.demand:
            since = self.cluster.tenant(name).below_fair_share_since
            out[name] = since is not None and t - since >= timeout - EPS
        return out

    def _decide(self, st: Any, t: float, waited: dict[tuple, tuple[int, int]]) -> None:
        """One request decided by the engine and the decision applied, as in the pass above."""
        cluster, idx = self.cluster, st.idx
        held = self.holders.get(idx, ())
        if held:
            cluster.remove(f"hold:{idx}")
        req = st.request(held)
        decision = decide(cluster, self.policy, req, t)
        self.engine_calls += 1
        if self.reserving.touched_by(decision):  # as the real pass (passes/run.py) does
            self.reserving.reserve(cluster)
            decision = decide(cluster, self.policy, req, t)
            self.engine_calls += 1
        if decision.outcome == "fits":
            self._start(st, decision, t)
        elif decision.outcome == "preempt":
            self._preempt(st, decision, t)
        elif held:
            reserve_free(cluster, f"hold:{idx}", list(held), self.holds)
        else:
            waited[st.wshape if self.incremental else st.shape] = (cluster.version, cluster.state_version)
            if decision.code in ROOMLESS:
                self.roomless.add(st.wshape)

    def _nothing_after(self, req: em.Allocation, starving: bool, backoff: bool) -> bool:
        """Whether no request from here on could start: none of the pending shapes fits, none is
        always decided, and every later one (smaller in the kind's first term) preempts no more
        than ``req`` could. Under a given order (``rank``) later ones may be of any class."""
        bounds, cluster = self.bounds, self.cluster
        if self.special or (bounds.borrowing and self.in_vc):
            return False
        if any(bounds.fits(cluster, *shape) for shape in self.rshapes.least()):
            return False
        if self.rank:
            return not bounds.may_preempt_any()
        if self.policy.kind == "class_cost" and not bounds.reachable_any(req.preemption_class, self.rshapes.least()):
            return True
        return not bounds.may_preempt(req, starving, backoff, rest=True)

    def _quiet(self, t: float, starving: dict[str, bool], backoff: bool) -> bool:
        """Whether no pending request could start now, read before the holders' nodes are reserved
        (without them there is only more free capacity: a sound "nothing fits")."""
        if self.special or (self.bounds.borrowing and self.in_vc):
            return False
        bounds, cluster = self.bounds, self.cluster
        bounds.refresh(cluster, t)
        if any(bounds.fits(cluster, *shape) for shape in self.rshapes.least()):
            return False
        kind = self.policy.kind
        if kind == "fair_share" and (backoff or not any(starving.get(name, False) for name in self.demand)):
            return True  # the engine's gates: nobody may preempt now (read before the victims)
        head = self.order.head()
        ranked = kind in ("class_cost", "priority") and head is not None and not self.rank
        if ranked and kind == "class_cost" and bounds.can_preempt and not bounds.reachable_any(
                self.jobs[head].job.preemption_class, self.rshapes.least()):
            return True  # every pending request is of the head's class or lower
        if not bounds.may_preempt_any():
            return True
        if kind == "fair_share":
            return False
        if ranked and head is not None:
            return not bounds.may_preempt(self.jobs[head].request(), False, backoff, rest=True)
        return False

    def _awaits_victims(self, st: Any) -> bool:
        """Whether the engine would answer a holder of nodes "wait, AWAITING_VICTIMS": it does not
        fit even with what is reserved for it counted free, and its held nodes stay usable (always
        so outside vClusters, on nodes that are never drained in a replay)."""
        cluster = self.cluster
        if cluster.vclusters:
            return False
        j = st.job
        g = cluster.res_index["gpu"]
        free = cluster.cap[:, g] - cluster.used[:, g]
        slot = cluster.slot_of.get(f"hold:{st.idx}")
        hold = cluster.objs[slot] if slot is not None else None
        for name, amounts in (hold.placement.items() if hold is not None else ()):
            free[cluster.node_index[name]] += amounts.get("gpu", 0.0)
        if j.cpus and "cpu" in cluster.res_index:
            c = cluster.res_index["cpu"]
            cpu = cluster.cap[:, c] - cluster.used[:, c]
            for name, amounts in (hold.placement.items() if hold is not None else ()):
                cpu[cluster.node_index[name]] += amounts.get("cpu", 0.0)
            return int(np.count_nonzero((free + EPS >= j.gpus) & (cpu + EPS >= j.cpus))) < j.nodes
        return int(np.count_nonzero(free + EPS >= j.gpus)) < j.nodes
