"""One navigation bar on every page: every route of the site's URL configuration is walked (the
console, the portal, the login, the API docs), every model page of the admin, and the error pages
(400, 403, 404 through the site, 500 from its handler): each HTML page has the bar exactly once."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from lattice_site import error_views
from scheduling.models import Placement, PolicyEvaluation, PreemptionDecision
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db

BAR = '<header class="top lattice-nav">'
# Routes that are not pages: JSON and text for programs, and POST-only actions (405 on GET, checked).
# A policy evaluation's report is the replay's self-contained HTML page, shown in a frame; the
# others are not HTML (a metrics text, a schema, a script).
NOT_PAGES = {"metrics", "schema", "ops-evaluation-report", "api-redoc-bundle", "favicon"}
POST_ONLY = {"logout", "ops-pause", "ops-override", "job-cancel", "job-verb", "ops-evaluate", "ops-evaluation-cancel"}
# Fragments a page fetches again to swap into itself: HTML without a bar of their own.
FRAGMENTS = {"ops-state"}


def _routes(patterns=None, prefix: str = "") -> list[tuple[str, str | None, URLPattern]]:
    out = []
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(p, URLResolver):
            if p.namespace == "admin" or str(p.pattern).startswith("api/v1/"):
                continue  # the admin is walked model by model below; the REST API answers JSON
            out += _routes(p.url_patterns, prefix + str(p.pattern))
        else:
            out.append((prefix + str(p.pattern), p.name, p))
    return out


@pytest.fixture
def site(operator, resource_group, vcluster_hpc, node_gpu_a, tenant_physics, make_allocation):
    job = make_allocation(state="running", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                          started_at=timezone.now())
    Placement.objects.create(allocation=job, node=node_gpu_a, gpu=8)
    make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)  # it waits: a decision to open
    decision = PreemptionDecision.objects.get()
    evaluation = PolicyEvaluation.objects.create(resource_group=resource_group, days=7, since=timezone.now(),
                                                 until=timezone.now(), current_policy=resource_group.policy,
                                                 candidate_policy=resource_group.policy)
    return {"evaluation": evaluation.pk, "name": resource_group.name, "pk": job.pk, "decision": decision.pk, "vcluster": vcluster_hpc.pk,
            "node": node_gpu_a.name, "tenant": tenant_physics.name}


def _kwargs(name: str | None, pattern: str, site: dict) -> dict:
    given = {"ops-group": {"name": site["name"]}, "ops-policy": {"name": site["name"]},
             "ops-pause": {"name": site["name"]},
             "ops-config": {"name": site["name"], "kind": "vclusters", "pk": site["vcluster"]},
             "ops-decision": {"pk": site["decision"]}, "ops-override": {"pk": site["pk"]},
             "ops-node": {"name": site["node"]}, "ops-tenant": {"name": site["tenant"]}, "job-detail": {"pk": site["pk"]}, "job-cancel": {"pk": site["pk"]},
             "job-verb": {"pk": site["pk"], "name": "hold"}, "ops-evaluate": {"name": site["name"]},
             **{name: {"name": site["name"], "pk": site["evaluation"]}
                for name in ("ops-evaluation", "ops-evaluation-cancel", "ops-evaluation-report")}}
    assert name in given or "<" not in pattern, f"a new route with parameters: {pattern} ({name})"
    return given.get(name or "", {})


def _one_bar(response, what: str) -> None:
    body = response.content.decode()
    assert body.count(BAR) == 1, f"{what}: {body.count(BAR)} navigation bars"
    assert re.search(r'<a class="brand" href="/">Lattice</a>', body), what


def test_every_routed_page_has_the_one_navigation_bar(client, site, operator):
    client.force_login(operator)
    walked = []
    for pattern, name, _ in _routes():
        if name in NOT_PAGES:
            continue
        url = reverse(name, kwargs=_kwargs(name, pattern, site))
        response = client.get(url)
        if name in POST_ONLY:
            assert response.status_code == 405, url
            continue
        assert response.status_code == 200, (url, response.status_code)
        if name in FRAGMENTS:
            assert BAR not in response.content.decode(), url
            continue
        _one_bar(response, url)
        walked.append(url)
    assert {"/", "/ops/", "/jobs/", "/api/docs/", "/api/redoc/", "/accounts/login/"} <= set(walked)
    # An operator's bar names every part of the site.
    body = client.get("/jobs/").content.decode()
    assert all(f'href="{href}"' in body for href in ("/ops/", "/ops/audit/", "/admin/", "/jobs/", "/api/docs/"))


def test_every_admin_page_has_the_one_navigation_bar(client, site, operator):
    operator.is_superuser = True
    operator.save()
    client.force_login(operator)
    urls = [reverse("admin:index"), reverse("admin:password_change")]
    for model in admin.site._registry:
        meta = model._meta
        urls.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        urls.append(reverse("admin:app_list", kwargs={"app_label": meta.app_label}))
        first = model.objects.first()
        if first is not None:
            urls.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[first.pk]))
    for url in dict.fromkeys(urls):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        _one_bar(response, url)
    assert len(urls) > 10


def test_error_pages_have_the_navigation_bar(client, tenant_physics, site):
    client.login(username="alice", password="pw-alice-123")
    forbidden = client.get("/ops/")
    assert forbidden.status_code == 403
    _one_bar(forbidden, "403")
    missing = client.get("/no-such-page/")
    assert missing.status_code == 404
    _one_bar(missing, "404")
    assert 'href="/jobs/"' in missing.content.decode()  # the member's own links
    _one_bar(Client().get("/no-such-page/"), "404 (anonymous)")
    bad = error_views.bad_request(RequestFactory().get("/jobs/"), ValueError("x"))
    assert bad.status_code == 400
    _one_bar(bad, "400")
    crashed = error_views.server_error(RequestFactory().get("/jobs/"))
    assert crashed.status_code == 500
    _one_bar(crashed, "500")
    assert 'href="/accounts/login/"' in crashed.content.decode()  # no user known: the login
