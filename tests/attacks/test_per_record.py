"""Per-record risk: exposure ranks (ties, invariance to the order of the records), the share of the true positives
carried by the top records, the summary and the per_record.csv writer."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from dpaudit.attacks.compare import compare_signals, strongest_attack
from dpaudit.attacks.per_record import RecordScores, exposure_ranks, summarise_records, tpr_share
from dpaudit.attacks.references import paired_inclusion, signals_from_scores
from dpaudit.errors import DataError, ParameterError
from dpaudit.report.attack_outputs import write_per_record
from dpaudit.serial import from_dict, to_dict


def test_exposure_ranks_share_ties_and_start_at_one():
    assert exposure_ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [1, 4, 1, 3]
    assert exposure_ranks([5.0]).tolist() == [1]


def _signals(n=400, m=300, K=8, seed=0):
    """Synthetic statistics: log p_y = -log(1 + exp(-margin)), margin = 1 + difficulty + 1.5 [trained on it] + noise."""
    rng = np.random.default_rng(seed)
    d = rng.normal(0, 1, n + m)
    member = rng.random(n) < 0.5
    inc = paired_inclusion(n, K, seed=seed + 1)

    def stats(in_mask, dd):
        margin = 1.0 + dd + 1.5 * in_mask + rng.normal(0, 0.5, np.shape(in_mask))
        return -np.logaddexp(0, -margin), margin

    tl, tp = stats(member, d[:n])
    rl, rp = stats(inc, d[:n, None])
    zl, _ = stats(np.zeros(m, bool), d[n:])
    zr, _ = stats(np.zeros((m, K), bool), d[n:, None])
    return tl, tp, rl, rp, inc, zl, zr, member


def test_per_record_ranks_do_not_depend_on_the_order_of_the_records():
    tl, tp, rl, rp, inc, zl, zr, member = _signals()
    ids = np.arange(1000, 1000 + len(tl))
    perm = np.random.default_rng(3).permutation(len(tl))
    runs = []
    for order in (np.arange(len(tl)), perm):
        sig = signals_from_scores(tl[order], tp[order], rl[order], rp[order], inc[order], population_logp=zl,
                                  population_reference_logp=zr)
        comp = compare_signals(sig, member[order], record=ids[order], labels=np.zeros(len(tl), int), n_bootstrap=0)
        rs = comp.records
        by_id = {}
        for a in rs.scores:
            ranks = rs.ranks(a)
            by_id[a] = dict(zip(rs.record.tolist(), ranks.tolist()))
        runs.append((by_id, comp))
    (first, c1), (second, c2) = runs
    assert first == second                                           # every attack, every record: the same rank
    assert c1.offline_a == c2.offline_a                              # the a fit does not depend on the order either
    for name in c1.results:
        assert c1.results[name].metrics.auc == pytest.approx(c2.results[name].metrics.auc, abs=1e-12)


def test_tpr_share_by_hand():
    # non-members 0..9 (scores 0.0..0.9), members with scores 5, 4, 3, 0.95, 0.05 and 0.5 (tie with a non-member)
    neg = np.arange(10) / 10
    pos = np.array([5.0, 4.0, 3.0, 0.95, 0.05, 0.5])
    s, mem = np.r_[pos, neg], np.r_[np.ones(6, bool), np.zeros(10, bool)]
    sh = tpr_share(s, mem, 0.0, top_fraction=0.125)       # FPR 0: cut = the largest non-member score 0.9
    assert (sh.true_positives, sh.tpr) == (4, 4 / 6)       # 5, 4, 3, 0.95
    assert sh.num_top == 2 and sh.top_true_positives == 2 and sh.share == pytest.approx(0.5)
    sh = tpr_share(s, mem, 0.1, top_fraction=0.125)       # one false positive allowed: cut = 0.8
    assert sh.true_positives == 4
    with pytest.raises(DataError):
        tpr_share(s, np.ones(16, bool), 0.01)


def test_summary_and_csv(tmp_path):
    tl, tp, rl, rp, inc, zl, zr, member = _signals(seed=4)
    sig = signals_from_scores(tl, tp, rl, rp, inc, population_logp=zl, population_reference_logp=zr)
    comp = compare_signals(sig, member, record=np.arange(len(tl)) * 3, labels=np.arange(len(tl)) % 10,
                           n_bootstrap=0)
    rs = comp.records
    assert rs.primary == strongest_attack(comp.results) and set(rs.scores) == set(comp.results)
    summ = summarise_records(rs, top=20)
    ranks = [t.rank for t in summ.top]
    assert len(summ.top) == 20 and ranks == sorted(ranks) and ranks[0] == 1
    assert summ.top[0].statistic_name.startswith(rs.primary + "_") or not summ.top[0].statistic_name
    assert [s.fpr for s in summ.shares] == [0.001, 0.01]
    paths = write_per_record(tmp_path, rs)
    assert {p.name for p in paths} >= {"per_record.csv", "per_record.json", "per_record.md", "per_record_hist.png"}
    with open(tmp_path / "per_record.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(tl)
    cols = set(rows[0])
    assert {"record", "label", "member", "rank", "rmia-online_score", "rmia-online_p_value", "lira-online_log_lr",
            "lira-offline_p_value", "threshold_score", "threshold_rank"} <= cols
    assert [int(r["rank"]) for r in rows] == sorted(int(r["rank"]) for r in rows)
    assert {int(r["record"]) for r in rows} == set((np.arange(len(tl)) * 3).tolist())
    got = {int(r["record"]): int(r["member"]) for r in rows}
    assert all(got[3 * i] == int(member[i]) for i in range(len(tl)))
    md = (tmp_path / "per_record.md").read_text()
    assert "Top 20 most exposed records" in md and "not a per-record guarantee" in md and "estimate" in md
    # the JSON round trip of the scores
    back = from_dict(RecordScores, to_dict(rs))
    assert np.array_equal(back.record, rs.record) and all(np.array_equal(back.scores[k], rs.scores[k]) for k in rs.scores)


def test_record_scores_validation():
    with pytest.raises(DataError):
        RecordScores(np.arange(3), np.zeros(2), np.zeros(3, bool), {"a": np.zeros(3)})
    with pytest.raises(ParameterError):
        RecordScores(np.arange(3), np.zeros(3), np.zeros(3, bool), {"a": np.zeros(3)}, primary="b")


def test_per_record_ranks_by_the_strongest_attack(tmp_path):
    # issue 36: per_record.md ranked by rmia-online even when another attack was stronger
    from dpaudit.attacks.compare import strongest_attack
    from dpaudit.attacks.run import attack_result

    rng = np.random.default_rng(0)
    neg = rng.normal(size=400)
    weak = attack_result("rmia-online", "weak", rng.normal(0.2, 1, 400), neg, threshold="held_out", confidence=0.95, delta=0.0, n_bootstrap=0, seed=0)
    strong = attack_result("threshold", "strong", rng.normal(2.0, 1, 400), neg, threshold="held_out", confidence=0.95, delta=0.0, n_bootstrap=0, seed=0)
    assert strongest_attack({"rmia-online": weak, "threshold": strong}) == "threshold"
    assert strongest_attack({"threshold": weak, "rmia-online": weak}) == "rmia-online"   # a tie: per-record p-values
    assert strongest_attack({}) == ""
    # through the comparison: the ranking attack is the one with the largest low-FPR TPR, and per_record.md says so
    tl, tp, rl, rp, inc, zl, zr, member = _signals(seed=4)
    comp = compare_signals(signals_from_scores(tl, tp, rl, rp, inc, population_logp=zl, population_reference_logp=zr),
                           member, n_bootstrap=0)
    best = comp.records.primary
    key = lambda r: (*(t for _, t in sorted(r.metrics.tpr_at_fpr.items())), r.metrics.auc)
    assert all(key(comp.results[best]) >= key(r) for r in comp.results.values())
    write_per_record(tmp_path, comp.records)
    assert f"**{best}**, the strongest attack run" in (tmp_path / "per_record.md").read_text()
