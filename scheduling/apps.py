from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        # Here, not at the top: signal receivers are connected once the app registry is ready,
        # and the database backend's modules (which timestamps loads) only then.
        from django.db.backends.signals import connection_created

        from lattice_site import prepared, timestamps  # (see the comment above)
        from scheduling import live_access  # noqa: F401  (connects its receivers; see the comment above)

        connection_created.connect(timestamps.install, dispatch_uid="lattice-timestamps")
        connection_created.connect(prepared.install, dispatch_uid="lattice-prepared")
