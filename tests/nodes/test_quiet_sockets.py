"""Agent sockets over the Redis channel layer stay open while nothing is sent to them.

channels_redis waits for a socket's messages with a blocking read (BZPOPMIN) of
``brpop_timeout`` seconds, again and again; the Redis client gives up on any reply
after its socket timeout. When the two were equal (5 s), an empty blocking read's
reply often came a moment past the client's timeout, the consumer's receive loop
raised, and the agent's socket was closed with 1011.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from lattice_site.asgi import application
from nodes.actions import agent_token_issue
from nodes.models import Node


def _layer_hosts(redis_url: str) -> list[dict]:
    from importlib import reload

    from lattice_site.settings import base, environment

    # The settings read the environment once, when ``environment`` is imported: read it again.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REDIS_URL", redis_url)
        reload(environment)
        reload(base)
        hosts = base.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
    reload(environment)
    reload(base)
    return hosts


def test_the_redis_client_waits_well_past_the_channel_layers_blocking_read():
    hosts = _layer_hosts("redis://127.0.0.1:6379/0")
    assert hosts and all(h["socket_timeout"] >= 2 * RedisChannelLayer.brpop_timeout for h in hosts)


QUIET_AGENTS = 40


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_quiet_agent_sockets_outlive_a_blocking_read(resource_group):
    """Many agents, silent for longer than a blocking read: every socket still answers."""
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "lattice_site.channel_layer.RedisChannelLayer"
    tokens = [agent_token_issue(node=Node.objects.create(name=f"q-{i}", resource_group=resource_group, gpu=1))
              for i in range(QUIET_AGENTS)]

    async def scenario():
        comms = [WebsocketCommunicator(application, "/ws/agent/",
                                       headers=[(b"authorization", f"Bearer {t}".encode())]) for t in tokens]
        for comm in comms:
            assert (await comm.connect(timeout=10))[0]
        await asyncio.sleep(RedisChannelLayer.brpop_timeout + 2)
        replies = []
        for i, comm in enumerate(comms):
            await comm.send_to(text_data=json.dumps({"type": "heartbeat", "id": f"b{i}", "seq": 1, "running": []}))
            replies.append(json.loads(await comm.receive_from(timeout=5)))
            await comm.disconnect()
        return replies

    assert async_to_sync(scenario)() == [{"type": "ack", "id": f"b{i}"} for i in range(QUIET_AGENTS)]
