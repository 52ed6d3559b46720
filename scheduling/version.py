"""Lattice's one version number: pyproject.toml's, read where the code runs from.

From a checkout (pyproject.toml beside the packages) it is that file's; installed, it is the
distribution's metadata, which the build copied from the same file. Imports nothing of Django:
the tenants' command line and the node agent print it too.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "lattice"
_CHECKOUT_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def version() -> str:
    try:
        project = tomllib.loads(_CHECKOUT_PYPROJECT.read_text())["project"]
        if project.get("name") == DISTRIBUTION:
            return str(project["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass  # not a checkout: installed
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = version()
