from django.urls import path
from rest_framework.routers import DefaultRouter

from nodes.api import NodeViewSet
from scheduling.api.allocations import AllocationViewSet
from scheduling.api.preemptions import PreemptionViewSet
from scheduling.api.simulate import SimulateView

app_name = "api"

router = DefaultRouter(trailing_slash=True)
router.register("allocations", AllocationViewSet, basename="allocation")
router.register("preemptions", PreemptionViewSet, basename="preemption")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = [
    path("simulate/", SimulateView.as_view(), name="simulate"),
    *router.urls,
]
