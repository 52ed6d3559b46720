"""Which files the distribution holds; everything else about it is in pyproject.toml.

The three packages with their migrations and management commands, and the project's templates/
and static/, which stay at the top of a checkout and are installed as data inside lattice_site
(lattice_site/settings/base.py looks for them in either place). pyproject.toml alone cannot add
those two to the packages it finds, hence this file.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["scheduling*", "nodes*", "lattice_site*"]),
              "lattice_site.templates", "lattice_site.static"],
    package_dir={"lattice_site.templates": "templates", "lattice_site.static": "static"},
    package_data={"lattice_site.templates": ["**/*"], "lattice_site.static": ["**/*"]},
)
