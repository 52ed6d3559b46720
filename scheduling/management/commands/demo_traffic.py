"""manage.py demo_traffic: the demo's tenants submitting work through the API, so the console lives.

    manage.py demo_traffic --url http://127.0.0.1:8000 [--interval 3] [--count N] [--seed S]

A client like any other: each demo member gets an API token (revoked again on exit)
and submits allocations of varied size, class, session type and checkpointing over
HTTP, so every decision, preemption and live event happens in the server, exactly
as for real tenants. Refusals (a quota reached, a class above the tenant's limit)
are printed and the next submission goes on; an unreachable server is retried.
"""

from __future__ import annotations

import json
import random
import signal
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser

from scheduling.actions.tokens import api_token_issue, api_token_revoke
from scheduling.management.arguments import http_url, seconds
from scheduling.management.database import DatabaseCommand
from scheduling.models import Membership, ResourceGroup
from scheduling.models.secrets import PREFIX_LEN

# (resource group, weight, its vClusters with weights): every demo group, so each preemption model
# (class cost, session ranks, fair-share starvation) acts live; the sensitive vCluster is left alone.
GROUPS = [("gpu-main", 3, [("hpc", 3), ("ml", 2)]), ("shared-east", 2, [("east", 3), ("lab", 2)]),
          ("fair-west", 2, [("west", 1)])]
# (session type, weight, class range): scavengers fill idle nodes, production work takes them back.
SESSIONS = [("scavenger", 4, (0, 1)), ("batch", 5, (2, 5)), ("production", 2, (6, 8)), ("critical", 1, (9, 9))]


@dataclass
class Member:
    tenant: str
    user: Any
    token: str


class Command(DatabaseCommand):
    help = "Submit varied work for the demo tenants through the API, forever or --count times."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", type=http_url, default="http://127.0.0.1:8000", help="the Lattice server")
        parser.add_argument("--interval", type=seconds(positive=True), default=3.0, help="mean seconds between submissions")
        parser.add_argument("--count", type=int, default=0, help="stop after this many (0: run until stopped)")
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        missing = sorted({name for name, _, _ in GROUPS} - set(ResourceGroup.objects.values_list("name", flat=True)))
        if missing:
            raise CommandError(f"no resource group {', '.join(missing)}: run manage.py seed_demo first",
                               returncode=2)
        members = [Member(m.tenant.name, m.user, "") for m in
                   Membership.objects.select_related("tenant", "user").filter(user__is_active=True)
                   .order_by("tenant__name")]
        if not members:
            raise CommandError("no tenant members to submit as: run manage.py seed_demo first", returncode=2)
        for member in members:
            member.token = api_token_issue(user=member.user)
        signal.signal(signal.SIGTERM, _stop)
        rng = random.Random(options["seed"])
        sent = 0
        try:
            while not options["count"] or sent < options["count"]:
                member = rng.choice(members)
                body = submission(rng, member.tenant)
                self.stdout.write(self._submit(options["url"].rstrip("/"), member, body))
                sent += 1
                time.sleep(rng.expovariate(1 / options["interval"]))
        except (KeyboardInterrupt, Stopped):
            pass
        finally:
            for member in members:
                api_token_revoke(user=member.user, prefix=member.token[:PREFIX_LEN])

    def _submit(self, base: str, member: Member, body: dict[str, Any]) -> str:
        request = urllib.request.Request(f"{base}/api/v1/allocations/", data=json.dumps(body).encode(),
                                         method="POST", headers={"Content-Type": "application/json",
                                                                 "Authorization": f"Token {member.token}"})
        what = (f"{member.tenant}: {body['nodes']} node(s), class {body['preemption_class']}, "
                f"{body['session_type']} in {body['resource_group']}/{body['vcluster']}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return f"submitted #{json.load(response)['id']} ({what})"
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            return f"refused ({what}): {exc.code} {detail}"
        except OSError as exc:
            return f"server unreachable ({exc}); trying again later"


class Stopped(Exception):
    pass


def _stop(*_: Any) -> None:
    raise Stopped  # out of any sleep at once; the tokens are revoked on the way out


def submission(rng: random.Random, tenant: str) -> dict[str, Any]:
    """One allocation request of the mix, as a tenant would send it."""
    group, _, vclusters = rng.choices(GROUPS, weights=[w for _, w, _ in GROUPS])[0]
    session, _, (low, high) = rng.choices(SESSIONS, weights=[w for _, w, _ in SESSIONS])[0]
    vcluster = rng.choices([v for v, _ in vclusters], weights=[w for _, w in vclusters])[0]
    return {
        "resource_group": group, "vcluster": vcluster, "session_type": session,
        "name": f"{tenant}-{session}-{rng.randrange(10_000):04d}",
        "nodes": rng.choice([1, 1, 1, 2, 2, 4]), "per_node": {"gpu": 8, "cpu": 64, "memory": 512},
        "preemption_class": rng.randint(low, high), "priority": rng.randint(10, 90),
        "checkpoint": rng.choice(["auto", "auto", "manual", "none"]),
        "walltime_minutes": rng.choice([30, 60, 120, 240]),
        "command": ["python", "train.py", "--epochs", str(rng.randint(1, 50))],
    }
