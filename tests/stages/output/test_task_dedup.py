"""Near-duplicate tasks found by behaviour (real sandbox): rewordings go, different tasks stay."""

import numpy as np
from arenaforge.stages.output.task_dedup import duplicate_tasks
from arenaforge.stages.verification.suites import Suite

ADD = "def add_two_numbers(a, b):\n    return a + b\n"
SUM = "def add_numbers(num1, num2):\n    return num1 + num2\n"
IS_PRIME = ("def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n")
COUNT = ("def count_primes(n):\n    return sum(1 for k in range(2, n + 1)\n"
         "               if all(k % d for d in range(2, int(k ** 0.5) + 1)))\n")


def suite(iid, entry, tests):
    return Suite(iid, entry, from_instruction=True, visible=tuple(tests))


def test_rewordings_of_one_task_keep_the_first_compress_chose(sandbox_pool):
    rows = [{"instruction_id": "sum", "code": SUM, "kcenter_rank": 4},
            {"instruction_id": "add", "code": ADD, "kcenter_rank": 1},
            {"instruction_id": "prime", "code": IS_PRIME, "kcenter_rank": 2},
            {"instruction_id": "count", "code": COUNT, "kcenter_rank": 3}]
    suites = {"add": suite("add", "add_two_numbers", ["assert add_two_numbers(2, 3) == 5"]),
              "sum": suite("sum", "add_numbers", ["assert add_numbers(-1, 1) == 0",
                                                  "assert add_numbers(4, 4) == 8"]),
              "prime": suite("prime", "is_prime", ["assert is_prime(7) is True",
                                                   "assert is_prime(9) is False"]),
              "count": suite("count", "count_primes", ["assert count_primes(10) == 4"])}
    # all four instructions read alike to the embedding model
    vectors = {k: np.array([1.0, 0.0]) for k in suites}
    dropped = duplicate_tasks(rows, vectors, suites, sandbox_pool, max_distance=0.75)
    # sum repeats add (each passes the other's tests); is-prime and count-primes do not
    assert dropped == {"sum": "add"}
    # far apart in text: never tried
    vectors["sum"] = np.array([0.0, 1.0])
    assert duplicate_tasks(rows, vectors, suites, sandbox_pool, max_distance=0.75) == {}


def test_each_rewording_is_tried_against_the_kept_rows_only(sandbox_pool, monkeypatch):
    from arenaforge.stages.verification import grading

    plus = "def plus(x, y):\n    return x + y\n"
    rows = [{"instruction_id": "add", "code": ADD, "kcenter_rank": 1},
            {"instruction_id": "sum", "code": SUM, "kcenter_rank": 2},
            {"instruction_id": "plus", "code": plus, "kcenter_rank": 3}]
    suites = {"add": suite("add", "add_two_numbers", ["assert add_two_numbers(2, 3) == 5"]),
              "sum": suite("sum", "add_numbers", ["assert add_numbers(4, 4) == 8"]),
              "plus": suite("plus", "plus", ["assert plus(1, 1) == 2"])}
    vectors = {k: np.array([1.0, 0.0]) for k in suites}
    graded = []
    real = grading.grade_any

    def counting(pool, items, *args, **kwargs):
        graded.extend(items)
        return real(pool, items, *args, **kwargs)

    monkeypatch.setattr(grading, "grade_any", counting)
    dropped = duplicate_tasks(rows, vectors, suites, sandbox_pool, max_distance=0.75)
    # both rewordings repeat the first compress chose, and map to it; "plus" is tried against
    # "add" only (sum is gone): 2 gradings a pair, 2 pairs, where all pairs would be 3
    assert dropped == {"sum": "add", "plus": "add"}
    assert len(graded) == 4


def test_a_row_is_tried_against_the_nearest_kept_rows_only(sandbox_pool, monkeypatch):
    from arenaforge.stages.verification import grading

    rows = [{"instruction_id": "prime", "code": IS_PRIME, "kcenter_rank": 1},
            {"instruction_id": "count", "code": COUNT, "kcenter_rank": 2},
            {"instruction_id": "add", "code": ADD, "kcenter_rank": 3},
            {"instruction_id": "sum", "code": SUM, "kcenter_rank": 4}]
    suites = {"add": suite("add", "add_two_numbers", ["assert add_two_numbers(2, 3) == 5"]),
              "sum": suite("sum", "add_numbers", ["assert add_numbers(4, 4) == 8"]),
              "prime": suite("prime", "is_prime", ["assert is_prime(7) is True"]),
              "count": suite("count", "count_primes", ["assert count_primes(10) == 4"])}
    # all within max_distance; "sum" lies nearest to "add"
    vectors = {"prime": np.array([0.0, 1.0]), "count": np.array([0.3, 0.95]),
               "add": np.array([1.0, 0.0]), "sum": np.array([0.99, 0.14])}
    graded = []
    real = grading.grade_any

    def counting(pool, items, *args, **kwargs):
        graded.extend((code.split("(")[0], suite.instruction_id) for code, suite in items)
        return real(pool, items, *args, **kwargs)

    monkeypatch.setattr(grading, "grade_any", counting)
    dropped = duplicate_tasks(rows, vectors, suites, sandbox_pool, max_distance=2.0,
                              max_tries=1)
    assert dropped == {"sum": "add"}
    # count, add, sum: each against its one nearest kept row; a pair's second grading only
    # when the first passed (count's and add's answers fail the tests they are tried on)
    assert graded == [("def count_primes", "prime"), ("def add_two_numbers", "count"),
                      ("def add_numbers", "add"), ("def add_two_numbers", "sum")]
