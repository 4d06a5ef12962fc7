"""``arenaforge verify-bench``: how often the run's ``verified`` is right, and how much of what
its experts solve it keeps, measured on problems whose hidden tests the run never sees.

Modules: ``problems`` (HumanEval and its translations; the instruction file),
``problems_file`` (a JSONL file of one's own problems, checked row by row),
``grading`` (an answer on the hidden tests in the sandbox), ``run_view`` (what the run did with
each instruction, read through its store), ``card`` (the metrics, pure), ``report``
(Markdown), ``bench`` (the command).
"""

from arenaforge.pipeline.apps.verify_bench.bench import BenchError, run_bench

__all__ = ["BenchError", "run_bench"]
