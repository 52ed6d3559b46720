"""The real-process fixtures of test_end_to_end (a Daphne, agent processes) for every test here,
and the test tenants as these tests' real agents need them."""

import os

import pytest

from nodes.agent import Agent
from nodes.models import AgentToken
from tests.nodes.test_end_to_end import agent_factory, control_plane, daphne, root_allowed  # noqa: F401

# The agents here run as this process's user and their tenants map no Unix user, so their work
# runs as the agent. As root, an agent refuses that unless the operator allowed root for the
# tenant (nodes/runas.py): here the operator has. As any other user, it refuses it unless the
# node's operator said so (--unmapped-as-agent): here they have, for the agents made in this
# process too. Run-as itself is tested in test_runas.py.
AS_ROOT = os.geteuid() == 0
ROOT_LEAVE = {"allow_root": True} if AS_ROOT else {}  # in a start frame without a user


@pytest.fixture(autouse=True)
def _unmapped_leave(monkeypatch):
    if not AS_ROOT:
        monkeypatch.setattr(Agent, "unmapped_as_agent", True)


@pytest.fixture
def tenant_physics(tenant_physics):
    return root_allowed(tenant_physics)


@pytest.fixture
def tenant_chemistry(tenant_chemistry):
    return root_allowed(tenant_chemistry)


def authenticated(token: str):
    """The node a token authenticates now (None: none), as an agent's connection finds it."""
    found = AgentToken.lookup(token, "node")
    return found.node if found is not None else None
