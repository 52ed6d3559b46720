"""The real-process fixtures of test_end_to_end (a Daphne, agent processes) for every test here."""

from tests.nodes.test_end_to_end import agent_factory, control_plane, daphne  # noqa: F401
