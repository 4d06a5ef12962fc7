"""The prompt API under the name the stages first used; it lives in ``arenaforge.pipeline.prompts``.

Kept only while callers still import it from here: import ``arenaforge.pipeline.prompts``.
"""

from __future__ import annotations

from arenaforge.pipeline.prompts import fill, load_template

__all__ = ["fill", "load_template"]
