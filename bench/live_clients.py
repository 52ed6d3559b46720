"""The live bench's clients: operator browsers on /ws/live/, background agents heartbeating, and
probe agents that report an exit when told (bench/live.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid

OPERATORS = 10


class Operators:
    """10 browser sockets; every event's arrival time per socket, and frames counted."""

    def __init__(self) -> None:
        self.arrivals: list[dict[str, float]] = []  # per socket: key -> first arrival
        self.frames = [0] * OPERATORS
        self.events = [0] * OPERATORS

    async def run(self, url: str, session: str, index: int, ready: asyncio.Event, count: list[int]) -> None:
        import websockets

        self.arrivals.append({})
        seen = self.arrivals[index]
        headers = {"Cookie": f"sessionid={session}", "Origin": "http://127.0.0.1"}
        async with websockets.connect(url, additional_headers=headers, max_size=2**22) as ws:
            await ws.recv()  # hello
            count[0] += 1
            if count[0] == OPERATORS:
                ready.set()
            async for text in ws:
                now = time.perf_counter()
                frame = json.loads(text)
                self.frames[index] += 1
                for event in frame.get("events", []):
                    self.events[index] += 1
                    if event.get("kind") == "decision":
                        seen.setdefault(f"{event.get('preemptor')}:decision", now)
                    ids = [event["allocation"]] if "allocation" in event else event.get("allocations", [])
                    for alloc in ids:
                        seen.setdefault(f"{alloc}:{event.get('state', 'running')}", now)

    async def wait_for(self, key: str, timeout: float = 10.0) -> list[float] | None:
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            if all(key in seen for seen in self.arrivals):
                return [seen[key] for seen in self.arrivals]
            await asyncio.sleep(0.001)
        return None


async def background_agent(url: str, token: str, stop: asyncio.Event) -> None:
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.send(json.dumps({"type": "hello", "id": uuid.uuid4().hex, "agent_version": "bench",
                                  "capacity": {"gpu": 8}, "labels": {}, "running": []}))
        await asyncio.sleep(5 * (hash(token) % 1000) / 1000)
        drain = asyncio.create_task(_drain(ws))
        while not stop.is_set():
            await ws.send(json.dumps({"type": "heartbeat", "id": uuid.uuid4().hex, "seq": time.time_ns() // 1000,
                                      "running": []}))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 5.0)
        drain.cancel()


async def _drain(ws: object) -> None:
    with contextlib.suppress(Exception):  # a dropped background agent only stops heartbeating
        async for _ in ws:  # type: ignore[attr-defined]
            pass


class Probe:
    """An agent whose one allocation is running; it reports the exit when told."""

    def __init__(self, url: str, token: str, alloc: str) -> None:
        self.url, self.token, self.alloc = url, token, alloc
        self.ws: object = None
        self.frame_id = ""
        self.acked_at = 0.0

    async def connect(self) -> None:
        import websockets

        self.ws = await websockets.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"})
        await self.ws.send(json.dumps({"type": "hello", "id": uuid.uuid4().hex, "agent_version": "bench",  # type: ignore[attr-defined]
                                       "capacity": {"gpu": 8}, "labels": {},
                                       "running": [{"allocation": self.alloc, "phase": "running", "pid": 1}]}))
        asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for text in self.ws:  # type: ignore[attr-defined]
            frame = json.loads(text)
            if frame.get("type") == "ack" and frame.get("id") == self.frame_id:
                self.acked_at = time.perf_counter()

    async def exit(self) -> float:
        t0 = time.perf_counter()
        self.frame_id = uuid.uuid4().hex
        await self.ws.send(json.dumps({"type": "exited", "id": self.frame_id,  # type: ignore[attr-defined]
                                       "allocation": self.alloc, "exit_code": 0, "reason": "completed"}))
        return t0
