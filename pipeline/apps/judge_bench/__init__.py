"""``arenaforge judge-bench``: how far each judge (model x protocol x reference) can be trusted,
measured on execution-labelled answer pairs of a benchmark with official tests.

Modules: ``config`` (the YAML), ``samples`` (answers and their execution), ``pairs`` (which
answers battle), ``judging`` (the judge stage's code, both orders, saved per chunk), ``card``
(the metrics, pure), ``report`` (Markdown and figures), ``bench`` (the command).
"""

from arenaforge.pipeline.apps.judge_bench.bench import run_bench
from arenaforge.pipeline.apps.judge_bench.config import BenchConfig, Variant, load_bench_config

__all__ = ["BenchConfig", "Variant", "load_bench_config", "run_bench"]
