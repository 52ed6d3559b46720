from django.urls import path

from scheduling.api.simulate import SimulateView

app_name = "api"

urlpatterns = [
    path("simulate/", SimulateView.as_view(), name="simulate"),
]
