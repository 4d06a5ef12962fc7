"""Packaging: the repository's ``pipeline/`` and ``stages/`` install under one import namespace.

``pip install`` puts them in a user's environment as ``arenaforge.pipeline`` and
``arenaforge.stages`` (never as generic top-level ``pipeline`` and ``stages`` modules that would
collide with other packages). Metadata and dependencies live in ``pyproject.toml``; only the
mapping is here, because ``pyproject.toml`` cannot prefix the packages it finds.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = ("pipeline", "stages")
found = find_namespace_packages(include=[p for f in FOLDERS for p in (f, f"{f}.*")])
setup(packages=[f"arenaforge.{p}" for p in found],
      package_dir={f"arenaforge.{f}": f for f in FOLDERS})
