from django.urls import path
from rest_framework.routers import DefaultRouter

from nodes.api import NodeViewSet
from scheduling.api.allocations import AllocationViewSet, ArrayViewSet
from scheduling.api.evaluations import EvaluationViewSet
from scheduling.api.members import MembershipViewSet
from scheduling.api.operators import (
    AuditViewSet,
    OverrideViewSet,
    QuotaViewSet,
    ResourceGroupViewSet,
    SessionTypeViewSet,
    TenantViewSet,
    VClusterViewSet,
)
from scheduling.api.preemptions import PreemptionViewSet
from scheduling.api.queue import QueueView
from scheduling.api.run_as import MemberRunAsViewSet, TenantRunAsViewSet
from scheduling.api.simulate import SimulateView
from scheduling.api.tokens import TokenViewSet
from scheduling.api.usage import UsageSeriesView, UsageView

app_name = "api"

router = DefaultRouter(trailing_slash=True)
router.register("allocations", AllocationViewSet, basename="allocation")
router.register("arrays", ArrayViewSet, basename="array")
router.register("preemptions", PreemptionViewSet, basename="preemption")
router.register("nodes", NodeViewSet, basename="node")
router.register("tokens", TokenViewSet, basename="token")
router.register("resource-groups", ResourceGroupViewSet, basename="resource-group")
router.register("vclusters", VClusterViewSet, basename="vcluster")
router.register("session-types", SessionTypeViewSet, basename="session-type")
router.register("tenants", TenantViewSet, basename="tenant")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("run-as/tenants", TenantRunAsViewSet, basename="run-as-tenant")
router.register("run-as/members", MemberRunAsViewSet, basename="run-as-member")
router.register("overrides", OverrideViewSet, basename="override")
router.register("audit", AuditViewSet, basename="audit")
router.register("evaluations", EvaluationViewSet, basename="evaluation")

urlpatterns = [
    path("simulate/", SimulateView.as_view(), name="simulate"),
    # Before the router: tenants read it too, while the rest of /resource-groups/ is operators'.
    path("resource-groups/<slug:name>/queue/", QueueView.as_view(), name="resource-group-queue"),
    path("usage/", UsageView.as_view(), name="usage"),
    path("usage/series/", UsageSeriesView.as_view(), name="usage-series"),
    *router.urls,
]
