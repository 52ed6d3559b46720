from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from lattice_site import prepared, timestamps

        connection_created.connect(timestamps.install, dispatch_uid="lattice-timestamps")
        connection_created.connect(prepared.install, dispatch_uid="lattice-prepared")
