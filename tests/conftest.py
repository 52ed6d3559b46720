"""Shared fixtures ("personas") and the rules for tests that need real services.

Tests marked ``postgres``, ``redis``, ``browser`` or ``install`` run when the service is
there. Without it they are skipped with the reason, except under CI=true,
where a missing service fails the test instead: CI must exercise them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
ROOT = Path(__file__).resolve().parent.parent

hypothesis_settings.register_profile("ci", max_examples=500, deadline=None)
hypothesis_settings.register_profile("dev", max_examples=100, deadline=None)
hypothesis_settings.register_profile("soak", max_examples=2000, deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if CI else "dev"))


def _postgres_available() -> str | None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        return "DATABASE_URL is not a PostgreSQL URL"
    return None


def _redis_available() -> str | None:
    url = os.environ.get("REDIS_URL")
    if not url:
        return "REDIS_URL is not set"
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # any connection problem means "not available"
        return f"Redis at REDIS_URL is not reachable: {exc}"
    return None


def _browser_available() -> str | None:
    if not Path("/usr/bin/chromium").exists() and not shutil.which("chromium"):
        return "Chromium is not installed (/usr/bin/chromium)"
    return None


def _install_wanted() -> str | None:
    """Building and installing a wheel takes a minute or two and PyPI: CI always does it."""
    if CI or os.environ.get("LATTICE_TEST_INSTALL", "").strip() == "1":
        return None
    return "set LATTICE_TEST_INSTALL=1 (CI=true does) to build and install a wheel"


CHECKS = {"postgres": _postgres_available, "redis": _redis_available, "browser": _browser_available,
          "install": _install_wanted}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, check in CHECKS.items():
        if item.get_closest_marker(marker) is None:
            continue
        missing = check()
        if missing is None:
            continue
        if CI:
            pytest.fail(f"CI=true requires {marker}: {missing}", pytrace=False)
        pytest.skip(f"needs {marker}: {missing}")


# -- personas -----------------------------------------------------------------------


@pytest.fixture
def operator(django_user_model):
    """A staff user: may read everything and change policies."""
    return django_user_model.objects.create_user("op", password="pw-op-123", is_staff=True)


@pytest.fixture
def resource_group(db):
    """A class_cost resource group, the product's default policy kind."""
    from scheduling.models import ResourceGroup

    return ResourceGroup.objects.create(name="rg-main", policy={"kind": "class_cost"})


@pytest.fixture
def vcluster_hpc(resource_group):
    from scheduling.models import VCluster

    return VCluster.objects.create(resource_group=resource_group, name="hpc", type="hpc_batch")


@pytest.fixture
def tenant_physics(db, django_user_model):
    """A tenant with a quota and one member (alice): the usual submitter."""
    from scheduling.models import Membership, Quota, Tenant

    tenant = Tenant.objects.create(name="physics")
    Quota.objects.create(tenant=tenant, max_nodes=8, max_gpus=64, max_concurrent_allocations=10,
                         fair_share=0.5)
    alice = django_user_model.objects.create_user("alice", password="pw-alice-123")
    Membership.objects.create(user=alice, tenant=tenant)
    return tenant


@pytest.fixture
def node_gpu_a(resource_group, vcluster_hpc):
    """One ready 8-GPU node in the hpc vCluster."""
    from nodes.models import Node

    return Node.objects.create(name="gpu-a", resource_group=resource_group, vcluster=vcluster_hpc,
                               gpu=8, cpu=64, memory=512, labels={"switch": "s1"}, state="ready")


@pytest.fixture
def make_allocation(resource_group, tenant_physics):
    from django.utils import timezone

    from scheduling.models import Allocation

    def make(**fields):
        user = tenant_physics.memberships.first().user
        defaults = {"resource_group": resource_group, "tenant": tenant_physics, "user": user,
                    "submitted_at": timezone.now()}
        defaults.update(fields)
        return Allocation.objects.create(**defaults)

    return make


@pytest.fixture
def tenant_chemistry(db, django_user_model):
    """A second tenant (bob): the one that must never see physics' work."""
    from scheduling.models import Membership, Quota, Tenant

    tenant = Tenant.objects.create(name="chemistry")
    Quota.objects.create(tenant=tenant, max_nodes=8, max_gpus=64, max_concurrent_allocations=10, fair_share=0.5)
    bob = django_user_model.objects.create_user("bob", password="pw-bob-123")
    Membership.objects.create(user=bob, tenant=tenant)
    return tenant


@pytest.fixture
def two_nodes(resource_group, vcluster_hpc):
    """Two ready 8-GPU nodes in hpc: small enough to fill with two jobs."""
    from nodes.models import Node

    return [Node.objects.create(name=f"gpu-{c}", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8,
                                cpu=64, memory=512, labels={"switch": "s1"}, state="ready") for c in "ab"]


@pytest.fixture
def api_for(client):
    """A logged-in API client for a username."""
    from django.contrib.auth import get_user_model

    def login(username):
        client.force_login(get_user_model().objects.get(username=username))
        return client

    return login


@pytest.fixture(autouse=True)
def no_kept_snapshots():
    """Each test starts without snapshots (PostgreSQL) or tenants' GPU-hours kept by an earlier
    test's passes."""
    from scheduling.passes import budget, snapshot_cache

    snapshot_cache.forget()
    budget.forget_use()
    yield
    snapshot_cache.forget()
    budget.forget_use()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, with the connections tests' threads left open ended before
    it is dropped: an agent socket's work runs in a thread pool of the test's event loop, each
    thread with its own connection, and a thread ended with its loop never closes it (on
    PostgreSQL the drop then fails, "being accessed by other users")."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()")
