from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView

from lattice_site.redoc import REDOC_DIST, RedocView, SwaggerView, redoc_bundle
from nodes import views as node_views
from scheduling import views
from scheduling.metrics import metrics_view
from scheduling.web import console, evaluations, ops, portal, tenants


class JobVerb:
    """The job page's verbs: any other name is a 404 whatever the method (not a 405 for a GET)."""

    regex = "hold|release|requeue"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(JobVerb, "job_verb")

urlpatterns = [
    path("", views.home, name="home"),
    # /healthz, /healthz/live and /healthz/ready are answered by lattice_site.probes.ProbeMiddleware.
    path("metrics", metrics_view, name="metrics"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("ops/", console.console, name="ops"),
    path("ops/state/", console.state, name="ops-state"),
    path("ops/audit/", ops.audit, name="ops-audit"),
    path("ops/groups/<slug:name>/", ops.group_detail, name="ops-group"),
    path("ops/groups/<slug:name>/policy/", ops.policy_editor, name="ops-policy"),
    path("ops/groups/<slug:name>/pause/", ops.pause, name="ops-pause"),
    path("ops/groups/<slug:name>/evaluations/", evaluations.evaluate, name="ops-evaluate"),
    path("ops/groups/<slug:name>/evaluations/<int:pk>/", evaluations.evaluation_detail, name="ops-evaluation"),
    path("ops/groups/<slug:name>/evaluations/<int:pk>/cancel/", evaluations.evaluation_stop,
         name="ops-evaluation-cancel"),
    path("ops/groups/<slug:name>/evaluations/<int:pk>/report/", evaluations.evaluation_report,
         name="ops-evaluation-report"),
    path("ops/groups/<slug:name>/<slug:kind>/<int:pk>/", ops.config_editor, name="ops-config"),
    path("ops/tenants/", tenants.tenant_list, name="ops-tenants"),
    path("ops/tenants/<slug:name>/", tenants.tenant_editor, name="ops-tenant"),
    path("ops/decisions/<int:pk>/", ops.decision_detail, name="ops-decision"),
    path("ops/allocations/<int:pk>/override/", ops.override, name="ops-override"),
    path("ops/nodes/<slug:name>/", node_views.node_detail, name="ops-node"),
    path("jobs/", portal.jobs, name="jobs"),
    path("jobs/new/", portal.submit, name="job-submit"),
    path("jobs/<int:pk>/", portal.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", portal.cancel, name="job-cancel"),
    path("jobs/<int:pk>/<job_verb:name>/", portal.verb, name="job-verb"),
    path("api/v1/", include("scheduling.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", RedocView.as_view(url_name="schema"), name="api-redoc"),
    path(f"{REDOC_DIST.strip('/')}/bundles/redoc.standalone.js", redoc_bundle, name="api-redoc-bundle"),
]

handler400 = "lattice_site.error_views.bad_request"
handler403 = "lattice_site.error_views.permission_denied"
handler404 = "lattice_site.error_views.page_not_found"
handler500 = "lattice_site.error_views.server_error"
