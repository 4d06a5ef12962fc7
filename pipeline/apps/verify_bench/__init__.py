"""``arenaforge verify-bench``: how often the run's ``verified`` is right, and how much of what
its experts solve it keeps, measured on problems whose hidden tests the run never sees.

Modules: ``problems`` (HumanEval, its translations or a JSONL file; the instruction file),
``grading`` (an answer on the hidden tests in the sandbox), ``run_view`` (what the run did with
each instruction, read through its store), ``card`` (the metrics, pure), ``report``
(Markdown), ``bench`` (the command).
"""

from arenaforge.pipeline.apps.verify_bench.bench import BenchError, run_bench

__all__ = ["BenchError", "run_bench"]
