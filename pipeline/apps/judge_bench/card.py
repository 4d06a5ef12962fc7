"""The judge card: each variant's verdicts against execution (pure functions over tables).

A pair's *verdict* is the protocol's combined verdict over both orders (for ``pairwise``, whose
orders give separate verdicts: equal orders give that verdict, different ones a tie, as
``rate`` resolves them); it is correct when it names the passing answer; a tie or no verdict
is wrong. Intervals are exact (Clopper-Pearson, ``scipy.stats.binomtest``) through
``arenaforge.stages.common.intervals.proportion``; kappa is Cohen's between the verdict (a / b / tie / none)
and execution (a / b). Position bias comes from the single-order readings (``order_verdict``):
``first_position`` is the share of decisive readings that chose the answer shown first (0.5:
no preference, since every pair is shown both ways), ``order_consistency`` the share of pairs
whose two readings agree.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from arenaforge.stages.arena.rate import judge_frame
from arenaforge.stages.common.intervals import mcnemar_p, proportion
from arenaforge.stages.output.audit_stats import cohen_kappa, jsonable


def pair_verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per pair: ``pair_id, verdict, reading_ab, reading_ba, seconds``."""
    wide = rows.pivot(index="pair_id", columns="order", values=["verdict", "order_verdict"])
    wide.columns = [f"{a}_{b}" for a, b in wide.columns]
    wide = wide.reindex(columns=["verdict_ab", "verdict_ba", "order_verdict_ab",
                                 "order_verdict_ba"])
    ab, ba = wide["verdict_ab"], wide["verdict_ba"]
    both = ab.notna() & ba.notna()
    combined = np.where(both & (ab == ba), ab, np.where(both, "tie", None))
    out = pd.DataFrame({"pair_id": wide.index, "verdict": combined,
                        "reading_ab": wide["order_verdict_ab"].to_numpy(),
                        "reading_ba": wide["order_verdict_ba"].to_numpy()})
    seconds = rows.groupby("pair_id")["seconds"].first()
    return out.merge(seconds.rename("seconds"), left_on="pair_id", right_index=True)


def first_position(readings_ab, readings_ba) -> dict:
    """Share of decisive single-order readings that chose the answer shown first.

    >>> first_position(["a", "a"], ["b", "tie"])["rate"]
    1.0
    """
    ab = pd.Series(readings_ab, dtype=object)
    ba = pd.Series(readings_ba, dtype=object)
    first = int((ab == "a").sum() + (ba == "b").sum())
    decisive = int(ab.isin(("a", "b")).sum() + ba.isin(("a", "b")).sum())
    return proportion(first, decisive)


def order_consistency(readings_ab, readings_ba) -> dict:
    """Share of pairs, both readings parsed, whose two single-order readings agree."""
    ab = pd.Series(readings_ab, dtype=object)
    ba = pd.Series(readings_ba, dtype=object)
    both = ab.notna().to_numpy() & ba.notna().to_numpy()
    return proportion(int((ab[both] == ba[both]).sum()), int(both.sum()))


def _accuracy(frame: pd.DataFrame) -> dict:
    verdict = frame["verdict"].to_numpy(dtype=object)
    truth = frame["passed"].to_numpy(dtype=object)
    out = proportion(int((verdict == truth).sum()), len(frame))
    out["kappa"] = cohen_kappa(truth, np.where(pd.isna(verdict), "none", verdict).astype(object)) \
        if len(frame) else None
    out["ties"] = int((verdict == "tie").sum())
    out["unparsed"] = int(pd.isna(verdict).sum())
    return out


def length_bias(frame: pd.DataFrame) -> dict:
    """How often the judge picked the failing answer, when it is the longer and the shorter."""
    failing_chars = np.where(frame["passed"] == "a", frame["chars_b"], frame["chars_a"])
    passing_chars = np.where(frame["passed"] == "a", frame["chars_a"], frame["chars_b"])
    failing = np.where(frame["passed"] == "a", "b", "a")
    picked = frame["verdict"].to_numpy(dtype=object) == failing
    longer = failing_chars > passing_chars
    shorter = failing_chars < passing_chars
    return {"failing_longer": proportion(int(picked[longer].sum()), int(longer.sum())),
            "failing_shorter": proportion(int(picked[shorter].sum()), int(shorter.sum()))}


def self_preference(frame: pd.DataFrame, judge: str, families: Mapping[str, str]) -> dict | None:
    """On cross-model pairs with exactly one contestant of the judge's family ("kin"): how
    often the judge picked the kin when the kin failed, and the other when the other failed.
    ``delta`` > 0 means the kin gets away with failing more often. None: no such pairs."""
    fam = families.get(judge)
    if not fam:
        return None
    kin_a = frame["model_a"].map(families).eq(fam)
    kin_b = frame["model_b"].map(families).eq(fam)
    mine = frame[(frame["pair_type"] == "cross_model") & (kin_a ^ kin_b)]
    if mine.empty:
        return None
    kin_side = np.where(mine["model_a"].map(families).eq(fam), "a", "b")
    kin_failed = mine["passed"].to_numpy(dtype=object) != kin_side
    picked_kin = mine["verdict"].to_numpy(dtype=object) == kin_side
    other = np.where(kin_side == "a", "b", "a")
    picked_other = mine["verdict"].to_numpy(dtype=object) == other
    kin = proportion(int(picked_kin[kin_failed].sum()), int(kin_failed.sum()))
    rest = proportion(int(picked_other[~kin_failed].sum()), int((~kin_failed).sum()))
    delta = (None if kin["rate"] is None or rest["rate"] is None
             else kin["rate"] - rest["rate"])
    return {"family": fam, "pairs": len(mine), "kin_failed_picked": kin,
            "other_failed_picked": rest, "delta": delta}


def alone_verdicts(rows: pd.DataFrame) -> pd.Series | None:
    """Sequential pointwise protocols: the verdict of the first-scored readings alone (each
    answer scored on its own, as StackEval and this protocol's first round do), per pair_id;
    None for the pair protocols."""
    if not rows["protocol"].isin(("pointwise", "pointwise_logprob")).all():
        return None
    col = {"pointwise": "score", "pointwise_logprob": "expected_score"}[rows["protocol"].iloc[0]]
    ab = rows[rows["order"] == "ab"].set_index("pair_id")[f"{col}_a"]
    ba = rows[rows["order"] == "ba"].set_index("pair_id")[f"{col}_b"].reindex(ab.index)
    verdict = np.where(ab > ba, "a", np.where(ab < ba, "b", "tie"))
    return pd.Series(np.where(ab.isna() | ba.isna(), None, verdict), index=ab.index,
                     dtype=object)


def pair_correct(rows: pd.DataFrame, pairs: pd.DataFrame) -> pd.Series:
    """Per pair_id: did the variant's verdict name the passing answer."""
    frame = pair_verdicts(judge_frame(rows)).merge(pairs, on="pair_id", how="left")
    return pd.Series((frame["verdict"] == frame["passed"]).to_numpy(), index=frame["pair_id"])


def paired_effect(with_: pd.Series, without: pd.Series) -> dict | None:
    """The same judge with and without a change (a reference) on the pairs both judged:
    both accuracies, the discordant pairs and the exact McNemar p (two-sided binomial test on
    the discordant pairs). None when no pair is shared."""
    shared = with_.index.intersection(without.index)
    if shared.empty:
        return None
    a, b = with_[shared].astype(bool), without[shared].astype(bool)
    gained, lost = int((a & ~b).sum()), int((~a & b).sum())
    return {"pairs": len(shared), "with": proportion(int(a.sum()), len(shared)),
            "without": proportion(int(b.sum()), len(shared)), "gained": gained, "lost": lost,
            "p_mcnemar": mcnemar_p(gained, lost) if gained + lost else 1.0}


def variant_result(variant, rows: pd.DataFrame, pairs: pd.DataFrame,
                   families: Mapping[str, str]) -> dict:
    """One variant's card entry (the ``results`` item of ``card.json``)."""
    frame = pair_verdicts(judge_frame(rows)).merge(pairs, on="pair_id", how="left")
    acc = _accuracy(frame)
    fp = first_position(frame["reading_ab"], frame["reading_ba"])
    oc = order_consistency(frame["reading_ab"], frame["reading_ba"])
    readings = pd.concat([frame["reading_ab"], frame["reading_ba"]]).to_numpy(dtype=object)
    alone = alone_verdicts(rows)
    alone_acc = None if alone is None else _accuracy(
        frame.assign(verdict=frame["pair_id"].map(alone)))
    truth = np.concatenate([frame["passed"].to_numpy(dtype=object)] * 2)
    return jsonable({
        "variant": variant.name, "judge": variant.judge, "protocol": variant.protocol,
        "reference": variant.reference != "none", "reference_kind": variant.reference,
        "n": acc["n"], "correct": acc["k"], "accuracy": acc["rate"], "ci_low": acc["ci_low"],
        "ci_high": acc["ci_high"], "kappa": acc["kappa"], "ties": acc["ties"],
        "unparsed": acc["unparsed"],
        "first_position": fp["rate"], "first_position_detail": fp,
        "order_consistency": oc["rate"], "order_consistency_detail": oc,
        "single_order_accuracy": proportion(int((readings == truth).sum()), len(readings)),
        "alone_accuracy": alone_acc,
        "by_pair_type": {k: _accuracy(g) for k, g in frame.groupby("pair_type", sort=True)},
        "by_difficulty": {k: _accuracy(g) for k, g in frame.groupby("difficulty", sort=True)},
        "length_bias": length_bias(frame),
        "self_preference": self_preference(frame, variant.judge, families),
        # over the chunks judged without the request cache's help (null: none was)
        "seconds_per_verdict": float(frame["seconds"].mean())
        if frame["seconds"].notna().any() else None,
        "seconds_measured_pairs": int(frame["seconds"].notna().sum()),
    })


def pair_counts(pairs: pd.DataFrame) -> dict:
    """The ``pairs`` block of ``card.json``."""
    kinds = pairs["pair_type"].value_counts() if len(pairs) else pd.Series(dtype=int)
    return {"count": len(pairs), "same_model": int(kinds.get("same_model", 0)),
            "cross_model": int(kinds.get("cross_model", 0)),
            "problems": int(pairs["task_id"].nunique()) if len(pairs) else 0,
            "by_models": {f"{a} vs {b}": int(n) for (a, b), n in
                          pairs.groupby(["model_a", "model_b"]).size().items()}
            if len(pairs) else {}}
