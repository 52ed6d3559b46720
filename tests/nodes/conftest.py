"""The real-process fixtures of test_end_to_end (a Daphne, agent processes) for every test here,
and the test tenants as these tests' real agents need them."""

import os

import pytest

from tests.nodes.test_end_to_end import agent_factory, control_plane, daphne  # noqa: F401

# The agents here run as this process's user and their tenants map no Unix user, so their work
# runs as the agent. As root, an agent refuses that unless the operator allowed root for the
# tenant (nodes/runas.py): here the operator has. Run-as itself is tested in test_runas.py.
AS_ROOT = os.geteuid() == 0
ROOT_LEAVE = {"allow_root": True} if AS_ROOT else {}  # in a start frame without a user


def _root_allowed(tenant):
    if AS_ROOT:
        tenant.allow_root = True
        tenant.save(update_fields=["allow_root"])
    return tenant


@pytest.fixture
def tenant_physics(tenant_physics):
    return _root_allowed(tenant_physics)


@pytest.fixture
def tenant_chemistry(tenant_chemistry):
    return _root_allowed(tenant_chemistry)
