from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "nodes"
    verbose_name = "Nodes and agents"

    def ready(self) -> None:
        # Here, not at the top: signal receivers are connected once the app registry is ready.
        from nodes import removal  # noqa: F401  (connects its receiver; see the comment above)
