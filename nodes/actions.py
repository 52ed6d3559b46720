"""Everything an agent's report or a node's liveness changes, as actions (one transaction each).

The consumer only parses frames and calls these; each returns what to answer,
and any commands are queued for after commit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from nodes.health import node_gpu_health
from nodes.heartbeats import nodes_changed, persist
from nodes.inventory import node_devices_report
from nodes.late_exits import (
    allocation_late_exit,
    lost_at_hello,
    lost_node_down,
    of_an_earlier_run,
    only_an_earlier_run_here,
)
from nodes.models import AgentToken, Node, NodeState, ProcessedFrame
from nodes.partial_exits import exited_on_one_node
from nodes.protocol import (
    Checkpoint,
    CheckpointDone,
    CheckpointProgress,
    Defer,
    Exited,
    Frame,
    Heartbeat,
    Hello,
    Kill,
    Started,
    Terminate,
    Welcome,
    encode,
    is_allocation_id,
)
from scheduling.actions.lifecycle import (
    allocation_exited,
    stopped_cancelled,
    stopped_failed,
    victim_failed,
    victim_stopping,
)
from scheduling.actions.policies import policy_change_record
from scheduling.actions.preemption import (
    allocation_checkpoint_done,
    allocation_checkpoint_progress,
    allocation_defer,
)
from scheduling.actions.release import give_back_borrowed
from scheduling.actions.starts import start_again
from scheduling.dispatch import agent_revoked_on_commit, event_on_commit
from scheduling.errors import InvalidTransition
from scheduling.models import Allocation, AllocationEvent, Placement
from scheduling.states import FAILING, HOLDING, Leaving, State

HEARTBEAT_INTERVAL_S = 10
HEARTBEAT_TIMEOUT_S = 30
NODE_GRACE_S = 60
# A processed frame's id makes a retry of that frame (its ack was lost, the agent resends it after
# reconnecting) change nothing. Retries come within the agent's reconnect, so a day is ample; past
# it the ids are pruned (a retry that late still finds its allocation's state machine, which
# ignores an exit of ended work).
FRAME_ID_RETENTION = timedelta(hours=24)
PRUNE_BATCH = 10_000


class FrameRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Reply:
    frames: list[dict[str, Any]] = field(default_factory=list)


# -- tokens ------------------------------------------------------------------------------

def agent_token_issue(*, node: Node) -> str:
    """A new token for the node's agent; shown once, stored as a digest."""
    return AgentToken.issue(node=node)


def agent_token_revoke(*, node: Node) -> int:
    """Revoke every token of the node; an agent connected with one is disconnected after commit."""
    revoked = AgentToken.objects.filter(node=node, revoked_at__isnull=True).update(revoked_at=timezone.now())
    if revoked:
        agent_revoked_on_commit(node.name)
    return revoked


def agent_token_simulated(*, node: Node) -> str:
    """A token for the node's simulated agent (run_agent --simulate-all): the earlier tokens it was
    given are revoked, tokens issued by hand (agent_token) or by an operator are left valid."""
    with transaction.atomic():
        earlier = list(AgentToken.objects.select_for_update()
                       .filter(node=node, simulated=True, revoked_at__isnull=True).values_list("pk", flat=True))
        if earlier:  # a simulated agent still running from the previous demo leaves; a real one stays
            AgentToken.objects.filter(pk__in=earlier).update(revoked_at=timezone.now())
            agent_revoked_on_commit(node.name, tokens=earlier)
        return AgentToken.issue(node=node, simulated=True)


def agent_token_replace(*, node: Node, actor: Any, reason: str = "") -> str:
    """An operator's new token for the node's agent (shown once): every earlier one is revoked in
    the same transaction, and the audit log says who did it and why."""
    with transaction.atomic():
        revoked = agent_token_revoke(node=node)
        token = agent_token_issue(node=node)
        policy_change_record(actor=actor, action="agent_token", target=node, before={"active_tokens": revoked},
                             after={"active_tokens": 1}, reason=reason)
    return token


def agent_connection(token: str) -> tuple[Node, int, int] | None:
    """The node ``token`` authenticates, the token's id (its connection is closed when that token
    is revoked, not when another of the node's is) and the connection's number among the node's,
    counted by the database: of two connections of one node the higher number is the newer,
    whichever server took it and whatever its clock says (a clock stepped back, or two hosts'
    clocks apart, must not keep a dead connection and send the live agent away). None for no
    valid token."""
    found = AgentToken.lookup(token, "node")
    if found is None:
        return None
    with transaction.atomic():
        Node.objects.filter(pk=found.node_id).update(agent_connections=F("agent_connections") + 1)
        number = Node.objects.filter(pk=found.node_id).values_list("agent_connections", flat=True).get()
    return found.node, found.pk, number


# -- reports -------------------------------------------------------------------------------

def node_hello(*, node: Node, frame: Hello, now: datetime | None = None) -> Reply:
    """Reconcile both ways: kill what the control plane considers ended, handle what the agent
    lost, and re-send what it never received (commands are re-derived from the database)."""
    moment = now or timezone.now()
    reply = Reply([encode(Welcome(node=node.name, heartbeat_interval_s=HEARTBEAT_INTERVAL_S))])
    reported: dict[str, set[int]] = {}  # allocation -> the runs listed (0: not named)
    for entry in frame.running:  # listed twice: an earlier run still leaving, and its next run waiting
        reported.setdefault(entry["allocation"], set()).add(entry.get("run", 0))
    with transaction.atomic():
        fresh = Node.objects.select_for_update().get(pk=node.pk)
        last_contact = fresh.last_heartbeat_at
        fresh.agent_version = frame.agent_version[:32]
        fresh.last_heartbeat_at = moment
        # A hello starts the node's heartbeat sequence again: an agent restarted on a clock set
        # back since its last run sends seqs below the stored one, which would all be refused.
        fresh.last_seq = 0
        revived = fresh.state in (NodeState.UNKNOWN, NodeState.DEGRADED, NodeState.DOWN)
        if revived:
            # Back from silence; a node its GPUs' health degraded stays so (nodes/health.py).
            fresh.state = NodeState.DEGRADED if fresh.health_reason else NodeState.READY
        fresh.save(update_fields=["agent_version", "last_heartbeat_at", "last_seq", "state"])
        if revived:
            nodes_changed([fresh.pk])
        node_devices_report(node=fresh, devices=frame.devices, cgroups=frame.cgroups, now=moment,
                            cgroups_note=frame.cgroups_note)
        placed = {str(p.allocation_id): p for p in Placement.objects.filter(
            node=node, kind="assigned", allocation__state__in=HOLDING).select_related("allocation__tenant")}
        for alloc_id in sorted(set(reported) - set(placed)):
            reply.frames.append(encode(Kill(allocation=alloc_id)))
        for alloc_id, p in sorted(placed.items()):
            alloc = p.allocation
            if alloc_id in reported and alloc.run and not reported[alloc_id] & {0, alloc.run}:
                # Only a process of an earlier run still alive: killed; the run now placed here
                # never started (the agent starts it once the old process is gone).
                reply.frames.append(encode(Kill(allocation=alloc_id)))
                reply.frames += only_an_earlier_run_here(placement=p, node=fresh, now=moment)
                continue
            if alloc_id in reported:
                if alloc.state == State.CHECKPOINTING:
                    reply.frames.append(encode(Checkpoint(allocation=alloc_id,
                                                          deadline=(alloc.deadline_at or moment).isoformat())))
                elif alloc.state == State.TERMINATING:
                    reply.frames.append(encode(Terminate(allocation=alloc_id)))
                continue
            never_sent = alloc.state == State.RUNNING and (
                last_contact is None or (alloc.started_at is not None and alloc.started_at >= last_contact))
            if never_sent:
                reply.frames.append(encode(start_again(alloc, node.name, p.pk)))
            else:
                _lost_at_hello(node, alloc, moment)
    return reply


def _lost_at_hello(node: Node, alloc: Allocation, now: datetime) -> None:
    """Declare work the agent no longer runs lost, tolerating a concurrent change of the same
    allocation: the agents of a multi-node allocation reconnect together at a fleet restart, and
    each hello fails it. The loser of that race sees the allocation as it is now and acts on that
    (nothing, when it has ended or left this node), rather than rolling its whole hello back."""
    reason = lost_at_hello(node.name)
    for _ in range(2):
        try:
            with transaction.atomic():
                allocation_lost(allocation=alloc, reason=reason, now=now, node=node)
            return
        except InvalidTransition:
            alloc.refresh_from_db()
            still_here = Placement.objects.filter(allocation=alloc, node=node, kind="assigned").exists()
            if alloc.state not in HOLDING or not still_here:
                return
    # Changed under us twice: the next hello or the liveness sweep settles it.


def node_heartbeat(*, node: Node, frame: Heartbeat, now: datetime | None = None) -> None:
    """One heartbeat, through the same batch writer the consumer uses, then its GPUs' health."""
    if not persist([(node.pk, frame.seq)], now or timezone.now())[0]:
        raise FrameRefused("STALE_SEQUENCE", f"seq {frame.seq} is not greater than the last accepted one")
    if frame.gpus is not None:
        node_gpu_health(node=node, gpus=frame.gpus, now=now)


def allocation_report(*, node: Node, frame: Frame, now: datetime | None = None) -> bool:
    """Apply a state-changing report once. Returns False for a duplicate (same id, same content);
    an id already applied with other content is refused (``ID_REUSED``), changing nothing."""
    assert isinstance(frame, Started | Exited | CheckpointProgress | CheckpointDone | Defer)
    moment = now or timezone.now()
    digest = frame_digest(frame)
    with transaction.atomic():
        try:
            with transaction.atomic():  # a savepoint: only the frame id's own conflict is a repeat
                ProcessedFrame.objects.create(node=node, frame_id=frame.id, digest=digest)
        except IntegrityError:
            _same_as_before(node, frame.id, digest)
            return False  # this frame was applied before: acknowledge, change nothing
        alloc, placed = _placed_here(node, frame.allocation)
        if of_an_earlier_run(allocation=alloc, node_name=node.name, frame=frame):
            pass  # requeued and started again since: the report says nothing of the run now
        elif not placed and not isinstance(frame, Exited):
            pass  # a node it has left (its process there gone): only its late exit still counts
        elif isinstance(frame, Started):
            if alloc.state in HOLDING:  # a late start of a run since suspended or requeued: nothing to say
                _started_row(alloc, node, frame.pid)
        elif isinstance(frame, Exited):
            late = alloc.state == State.FAILED and allocation_late_exit(
                allocation=alloc, node_name=node.name, exit_code=frame.exit_code, reason=frame.reason,
                now=moment)
            if not late and not exited_on_one_node(allocation=alloc, node=node, exit_code=frame.exit_code,
                                                   reason=frame.reason, now=moment):
                allocation_exited(allocation=alloc, exit_code=frame.exit_code, reason=frame.reason,
                                      now=moment)
        elif isinstance(frame, CheckpointProgress):
            allocation_checkpoint_progress(allocation=alloc, now=moment)
        elif isinstance(frame, CheckpointDone):
            allocation_checkpoint_done(allocation=alloc, ok=frame.ok, location=frame.location,
                                           size_bytes=frame.size_bytes, error=frame.error, now=moment)
        else:
            allocation_defer(allocation=alloc, seconds=frame.seconds, now=moment)
    return True


def frame_digest(frame: Frame) -> str:
    """SHA-256 of what the frame says, its id left out (the same frame resent digests the same)."""
    content = {k: v for k, v in encode(frame).items() if k != "id"}
    return hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _same_as_before(node: Node, frame_id: str, digest: str) -> None:
    """A repeated id must repeat its frame: an agent reusing an id for another report would have
    that report acknowledged and never applied. (Ids recorded without a digest pass.)"""
    stored = ProcessedFrame.objects.filter(node=node, frame_id=frame_id).values_list("digest", flat=True).first()
    if stored and stored != digest:
        raise FrameRefused("ID_REUSED", f"frame id {frame_id!r} was already used for a different frame; "
                                        "a resent frame must repeat it exactly, a new frame needs a new id")


STARTED = "started on "


def _started_row(alloc: Allocation, node: Node, pid: int) -> None:
    """One history row per start, naming each node as its agent reports the process started, with
    its pid (the per-node detail): the first report writes ``started on gpu-a (pid 11)``, the others
    of the same start add to it (``, gpu-b (pid 12)``). A node that reports again within the same
    start ran a new process and begins a new row. The allocation's row is locked first, so the
    agents of one start reporting at once add to one row."""
    Allocation.objects.select_for_update().filter(pk=alloc.pk).first()
    how = f"{node.name} ({f'pid {pid}' if pid else 'simulated, no process'})"  # pid 0: --simulate
    began = (AllocationEvent.objects.filter(allocation=alloc, to_state=State.RUNNING)
             .exclude(from_state=State.RUNNING).order_by("-id").values_list("id", flat=True).first())
    row = (AllocationEvent.objects.filter(allocation=alloc, reason__startswith=STARTED, id__gt=began or 0)
           .order_by("-id").first())
    named = row.reason.removeprefix(STARTED).split(", ") if row is not None else []
    if row is None or any(entry.split(" (")[0] == node.name for entry in named):
        AllocationEvent.objects.create(allocation=alloc, from_state=alloc.state, to_state=alloc.state,
                                       reason=STARTED + how)
        return
    if row.reason.endswith(MORE):
        return
    reason = f"{row.reason}, {how}"
    row.reason = reason if len(reason) <= REASON_MAX - len(MORE) else row.reason + MORE  # the column's length
    row.save(update_fields=["reason"])


MORE = " and more nodes"
REASON_MAX = AllocationEvent._meta.get_field("reason").max_length or 255


def _placed_here(node: Node, alloc_id: str) -> tuple[Allocation, bool]:
    """The allocation, if it is (or was, for a late exit) placed on this node, and whether it is now."""
    if not is_allocation_id(alloc_id):  # the parser refuses these; an action is called by others too
        raise FrameRefused("NOT_ON_THIS_NODE", f"allocation {alloc_id} is not placed on {node.name}")
    alloc = Allocation.objects.filter(pk=int(alloc_id)).first()
    if alloc is None:
        raise FrameRefused("NOT_ON_THIS_NODE", f"allocation {alloc_id} is not placed on {node.name}")
    placed = Placement.objects.filter(allocation=alloc, node=node).exists()
    if not placed and node.name not in (alloc.ran_on or []):
        raise FrameRefused("NOT_ON_THIS_NODE", f"allocation {alloc_id} is not placed on {node.name}")
    return alloc, placed


# -- liveness and node operations -------------------------------------------------------------

def allocation_lost(*, allocation: Allocation, reason: str, now: datetime, node: Node | None = None) -> None:
    """Work ``node`` lost: failed, and a fresh copy requeued when its policy allows. Where it
    still runs on other nodes (whose agents are alive), it is killed there and keeps those nodes
    until its exit is reported or the grace passes: only then may anyone start on them."""
    if allocation.state not in HOLDING:
        return
    elsewhere = [] if node is None else list(
        Placement.objects.filter(allocation=allocation, kind="assigned").exclude(node=node)
        .exclude(node__state=NodeState.DOWN).values_list("node_id", flat=True))
    if elsewhere:
        assert node is not None
        Placement.objects.filter(allocation=allocation, node=node).delete()
        give_back_borrowed([node.pk])
        # That node alone is freed (accounting bills it no longer); the others keep it until gone.
        AllocationEvent.objects.create(allocation=allocation, from_state=allocation.state, to_state=allocation.state,
                                       reason=f"{reason}; {len(elsewhere)} more node(s) still held"[:255],
                                       node_freed=True)
        # The first failure decides how it ends (its words and its kind); else this node's loss.
        victim_stopping(allocation, allocation.fail_reason or reason, now, command="kill",
                        leaving=allocation.leaving if allocation.leaving in FAILING else Leaving.NODE_LOST)
    elif allocation.being_cancelled:  # being cancelled, and now gone
        stopped_cancelled(allocation, reason, now)
    elif allocation.leaving in FAILING:  # already stopping for a failure, and now gone: declared lost
        stopped_failed(allocation, reason, now)
    else:
        victim_failed(allocation, reason, now, node_failure=True)
    event_on_commit("allocation.state", {"allocation": allocation.pk, "state": allocation.state},
                    allocation.tenant_id)


def node_liveness_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """Ready -> Degraded after 30 s of silence; Degraded -> Down after 60 s more (work requeued or
    failed by policy, capacity released). A draining (or drained) node keeps that state, which is
    the operator's to end (audited): after as long a silence its work is handled as lost all the
    same, and counted in ``down``. Safe to run any number of times."""
    moment = now or timezone.now()
    quiet = list(Node.objects.filter(state=NodeState.READY,
                                     last_heartbeat_at__lt=moment - timedelta(seconds=HEARTBEAT_TIMEOUT_S))
                 .values_list("pk", flat=True))
    degraded = Node.objects.filter(pk__in=quiet, state=NodeState.READY).update(state=NodeState.DEGRADED)
    nodes_changed(quiet)
    cutoff = moment - timedelta(seconds=HEARTBEAT_TIMEOUT_S + NODE_GRACE_S)
    drained = [NodeState.DRAINING, NodeState.DRAINED]
    silent = Node.objects.filter(Q(state=NodeState.DEGRADED) | Q(state__in=drained, placements__isnull=False),
                                 last_heartbeat_at__lt=cutoff).distinct()
    down = 0
    for node in silent:
        with transaction.atomic():
            if node.state == NodeState.DEGRADED:
                if not Node.objects.filter(pk=node.pk, state=NodeState.DEGRADED).update(state=NodeState.DOWN):
                    continue
            elif not Node.objects.select_for_update().filter(pk=node.pk, state__in=drained,
                                                             last_heartbeat_at__lt=cutoff).exists():
                continue  # undrained or heard from meanwhile
            _node_work_lost(node, moment)
            nodes_changed([node.pk])
            down += 1
    return {"degraded": degraded, "down": down}


def _node_work_lost(node: Node, moment: datetime) -> None:
    for p in Placement.objects.filter(node=node, kind="assigned").select_related("allocation"):
        allocation_lost(allocation=p.allocation, reason=lost_node_down(node.name), now=moment, node=node)
    Placement.objects.filter(node=node, kind="held").delete()
    give_back_borrowed([node.pk])


def processed_frames_prune(*, now: datetime | None = None) -> int:
    """Forget frame ids older than FRAME_ID_RETENTION, at most PRUNE_BATCH per call (the periodic
    sweep calls it every few seconds, so a backlog drains without one long statement)."""
    cutoff = (now or timezone.now()) - FRAME_ID_RETENTION
    old = list(ProcessedFrame.objects.filter(created_at__lt=cutoff).order_by("created_at")
               .values_list("pk", flat=True)[:PRUNE_BATCH])
    return ProcessedFrame.objects.filter(pk__in=old).delete()[0] if old else 0
