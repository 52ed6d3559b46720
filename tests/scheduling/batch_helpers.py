"""What the batch-verb tests share: agents that record the frames sent to them after commit, the
tasks asked for, exits reported through the agent protocol's report path, and submissions over
REST."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.test import Client

from nodes.actions import allocation_report
from nodes.models import Node
from nodes.protocol import Exited
from scheduling import dispatch
from scheduling.models import Allocation, PolicyChange

_ids = itertools.count(1)


class Recorder:
    """The agent commands and tasks the control plane sends after commit."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self.tasks: list[tuple[str, tuple[Any, ...]]] = []

    def deliver(self, messages: list[tuple[str, dict[str, Any]]], what: str) -> None:
        for group, message in messages:
            if group.startswith("agent.") and message.get("type") == "agent.command":
                self.frames.append((group.removeprefix("agent."), message["frame"]))

    def starts(self, alloc_id: int) -> list[dict[str, Any]]:
        return [f for _, f in self.frames if f["type"] == "start" and f["allocation"] == str(alloc_id)]

    def passes_asked(self) -> list[int]:
        return [args[0] for name, args in self.tasks if name == dispatch.SCHEDULE_PASS]


@pytest.fixture(name="sent")
def sent_fixture(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(dispatch, "_send_all", recorder.deliver)

    class Task:  # passes and deadlines are driven by the test, not by a broker
        def __init__(self, name: str) -> None:
            self.name = name

        def delay(self, *args: Any) -> None:
            recorder.tasks.append((self.name, args))

        def apply_async(self, args: tuple[Any, ...] = (), **kw: Any) -> None:
            recorder.tasks.append((self.name, tuple(args)))

    monkeypatch.setattr(dispatch, "_task", Task)
    return recorder


def exit_on(alloc_id: int, *, code: int, reason: str) -> None:
    """Its agent reports the process gone (the report path the agents' socket uses)."""
    alloc = Allocation.objects.get(pk=alloc_id)
    node = Node.objects.get(name=alloc.ran_on[0])
    assert allocation_report(node=node, frame=Exited(id=f"x{next(_ids)}", allocation=str(alloc_id),
                                                     exit_code=code, reason=reason))


def post(c: Client, url: str, body: dict[str, Any] | None = None) -> Any:
    return c.post(url, body or {}, content_type="application/json")


def job(c: Client, **body: Any) -> Any:
    return post(c, "/api/v1/allocations/", {"resource_group": "rg-main", "vcluster": "hpc", "per_node": {"gpu": 8},
                                            "command": ["train"], **body})


def job_id(c: Client, **body: Any) -> int:
    response = job(c, **body)
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def state(alloc_id: int) -> str:
    return str(Allocation.objects.get(pk=alloc_id).state)


def audited(action: str, alloc_id: int) -> list[tuple[str | None, str]]:
    return [(p.actor.username if p.actor else None, p.reason) for p in
            PolicyChange.objects.filter(action=action, target_id=str(alloc_id)).order_by("id")]
