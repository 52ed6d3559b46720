"""``pynvml`` for agent processes the tests start (on PYTHONPATH): the fake of tests/nodes/nvml_fake.py."""

from tests.nodes.nvml_fake import (
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_TEMPERATURE_GPU,
    NVML_VOLATILE_ECC,
    NVMLError,
    from_env,
)

_fake = from_env()
__all__ = ["NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_TEMPERATURE_GPU", "NVML_VOLATILE_ECC", "NVMLError"]


def __getattr__(name: str):
    return getattr(_fake, name)
