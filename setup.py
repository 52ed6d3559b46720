"""Which files the distribution holds; everything else about it is in pyproject.toml.

The three packages with their migrations and management commands, and the project's templates/
and static/, which stay at the top of a checkout and are installed as data inside lattice_site
(lattice_site/settings/base.py looks for them in either place). pyproject.toml alone cannot map
two folders of the checkout into a package it finds, hence this file.
"""

from pathlib import Path

from setuptools import find_packages, setup


def data_packages(package: str, folder: str) -> dict[str, str]:
    """The folder and each folder under it as a package of data files (so setuptools installs
    every file and does not mistake a subfolder for a package left out)."""
    root = Path(folder)
    folders = [root, *sorted(p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    return {".".join([package, *f.relative_to(root).parts]): f.as_posix() for f in folders}


data = {**data_packages("lattice_site.templates", "templates"), **data_packages("lattice_site.static", "static")}

setup(
    packages=[*find_packages(include=["scheduling*", "nodes*", "lattice_site*"]), *data],
    package_dir=data,
    package_data={name: ["*"] for name in data},
)
