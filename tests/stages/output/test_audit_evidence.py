"""The audit's evidence figures: circular trusted tests and the global term's weight."""

import pandas as pd
from arenaforge.stages.output.audit_evidence import evidence_metrics


def test_circular_tests_are_trusted_tests_by_a_judge_of_the_same_instruction():
    tests = pd.DataFrame({"instruction_id": ["i", "i", "i", "j"],
                          "author": ["m1", "m2", "m2", "m2"],
                          "survived": [True, True, False, True]})
    judge = pd.DataFrame({"instruction_id": ["i", "i", "j"], "judge": ["m2", "m2", "m3"]})
    rate = pd.DataFrame({"instruction_id": ["i", "i", "j", "k"],
                         "winner": ["m1", "m1", "m1", None],
                         "decided_by": ["global", "global", "local", None]})
    m = evidence_metrics(tests, judge, rate)
    # i: m2's trusted test is circular (m2 judged i); its dropped one and j's are not
    assert (m["circular_trusted_tests"], m["trusted_tests"]) == (1, 3)
    assert m["circular_by_author"] == {"m2": 1}
    # two instructions with a winner, one decided by the global term
    assert m["alpha_decisive_share"] == 0.5 and m["decided_by"] == {"global": 1, "local": 1}


def test_without_tests_or_decided_by_nothing_is_made_up():
    rate = pd.DataFrame({"instruction_id": ["i"], "winner": ["m1"]})
    m = evidence_metrics(None, pd.DataFrame({"instruction_id": [], "judge": []}), rate)
    assert m["circular_trusted_tests"] is None and m["alpha_decisive_share"] is None
