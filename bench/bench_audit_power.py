"""Benchmark: the power and soundness of dpaudit's certified canary-audit analyses on exact mechanisms (the README
table "How high can a certified audit reach?", committed as reports/power/power.md).

    python bench/bench_audit_power.py                        # the table: 200 seeds (tens of minutes on 2 cores)
    python bench/bench_audit_power.py --seeds 20             # a quick look (same rules, fewer seeds)
    python bench/bench_audit_power.py --dpsgd                # the default audit's DP-SGD canary audit, seeds 0-2
    python bench/bench_audit_power.py --out reports/power    # also write power.json / power.md there

Mechanism: the Gaussian mechanism with mu chosen so that it is exactly (eps, 1e-5)-DP for eps = 1, 2, 4, 8 (Balle &
Wang 2018); a canary's observation is N(mu, 1) when included and N(0, 1) when not, and the score is the observation
(the exact likelihood-ratio test). For each seed: fresh fair coins and observations for m canaries (one run) or N
independent runs (multi-run). Rules, side by side (each certified at confidence 0.95 unless said otherwise):

- one run, m = 1,000 and 10,000 canaries --
  ``today``: Steinke et al. 2023 Thm 3 with equal in/out counts over six k (dpaudit's rule before issue 24);
  ``thm3-ceiling``: Thm 3 with the best of 35 guess-count pairs chosen *after* seeing the coins, at full level --
  not a valid bound, the most any Theorem-3 rule could get from these scores;
  ``grid``: Thm 3 over the honest guess grid (14 pairs, unequal counts, Bonferroni);
  ``planned``: Thm 3 with one guess-count pair planned before the run on simulated audits of the mechanism;
  ``fdp``: the f-DP test with Gaussian-DP curves (Mahloujifar et al. 2025), planned pair -- exact here, the
  mechanism *is* Gaussian;
  ``fdp-dp``: the f-DP test with (eps, delta) curves (no assumption on the curve), planned pair;
- multi-run, N = 200 and 1,000 runs --
  ``multi-today``: Clopper-Pearson on the (eps, delta) test, threshold on a split half;
  ``multi-gdp``: certified Gaussian-DP mu from Clopper-Pearson FPR/FNR (threshold on a quarter of the runs);
  ``multi-gdp-planned``: the same with one threshold planned before the runs on simulated audits of the mechanism
  (every run counts; right for a mechanism test, where the attack is the ideal one);
  ``multi-bayes``: the Bayesian posterior median (an estimate; its "failure" column is the share of seeds whose
  95% credible interval misses the true epsilon).

Reported per rule: the median bound over seeds, its ratio to the true epsilon, and the observed failure rate (bound
above the true epsilon; must be <= 5% for a valid certified rule). Seeds are fixed: the same command gives the same
table. Seconds depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DELTA = 1e-5
CONF = 0.95
EPSILONS = (1.0, 2.0, 4.0, 8.0)
CANARIES = (1000, 10000)
RUNS = (200, 1000)
ONE_RUN_RULES = ("today", "thm3-ceiling", "grid", "planned", "fdp", "fdp-dp")
MULTI_RULES = ("multi-today", "multi-gdp", "multi-gdp-planned", "multi-bayes")
LABELS = {
    "today": "Thm 3, equal counts (dpaudit's earlier rule)",
    "thm3-ceiling": "Thm 3, best pair in hindsight (NOT valid: ceiling)",
    "grid": "Thm 3, honest guess grid (Bonferroni)",
    "planned": "Thm 3, pair planned before the run",
    "fdp": "f-DP, Gaussian-DP curves, planned pair",
    "fdp-dp": "f-DP, (eps, delta) curves, planned pair",
    "multi-today": "multi-run Clopper-Pearson (eps, delta) test",
    "multi-gdp": "multi-run Gaussian DP (Clopper-Pearson FPR/FNR), threshold on a split",
    "multi-gdp-planned": "multi-run Gaussian DP, threshold planned before the runs",
    "multi-bayes": "multi-run Bayesian posterior median",
}
KIND = {"thm3-ceiling": "reference (not valid)", "multi-bayes": "estimate"}


def mu_for(eps: float) -> float:
    from scipy import optimize

    from dpaudit.accountants.closed_form import gaussian_mechanism_epsilon

    return float(optimize.brentq(lambda mu: gaussian_mechanism_epsilon(mu, DELTA) - eps, 1e-4, 60.0, xtol=1e-12))


def one_run_config(eps: float, m: int, seeds: int, plan_replicates: int) -> dict:
    from dpaudit.attacks.auditor import CanaryScoreAuditor, EqualGuesses, GuessGrid
    from dpaudit.attacks.canary import PLAN_TOTALS, plan_one_run

    mu = mu_for(eps)
    mech = {"kind": "gaussian", "mu": mu}
    t0 = time.perf_counter()
    plan = plan_one_run(m, mechanism=mech, delta=DELTA, confidence=CONF, single_pairs=True,
                        replicates=plan_replicates, seed=0)
    t_plan = time.perf_counter() - t0
    cand = np.concatenate([GuessGrid(totals=PLAN_TOTALS, in_shares=(0.0, 0.25, 0.5, 0.75, 1.0)).pairs(m),
                           EqualGuesses().pairs(m)])
    vals = {k: np.empty(seeds) for k in ONE_RUN_RULES}
    for s in range(seeds):
        rng = np.random.default_rng(np.random.SeedSequence([s, m, int(eps * 100), 0xB0]))
        inc = rng.random(m) < 0.5
        a = CanaryScoreAuditor.from_canaries(inc * mu + rng.standard_normal(m), inc)
        vals["today"][s] = a.one_run_eps(EqualGuesses(), delta=DELTA, confidence=CONF).epsilon
        vals["thm3-ceiling"][s] = a.one_run_eps_each(cand[:, 0], cand[:, 1], delta=DELTA, alpha=1 - CONF).max()
        vals["grid"][s] = a.one_run_eps(GuessGrid(), delta=DELTA, confidence=CONF).epsilon
        vals["planned"][s] = a.one_run_eps(plan.rules["eps"], delta=DELTA, confidence=CONF).epsilon
        vals["fdp"][s] = a.one_run_fdp(plan.rules["fdp"], delta=DELTA, confidence=CONF, family="gaussian").epsilon
        vals["fdp-dp"][s] = a.one_run_fdp(plan.rules["fdp-dp"], delta=DELTA, confidence=CONF,
                                          family="approx-dp").epsilon
    return {"eps": eps, "mu": mu, "m": m, "seeds": seeds, "plan": plan.to_dict(),
            "rules": {k: _stats(v, eps) for k, v in vals.items()},
            "seconds": round(time.perf_counter() - t0, 1), "plan_seconds": round(t_plan, 1)}


def multi_run_config(eps: float, n: int, seeds: int) -> dict:
    from dpaudit.attacks.auditor import BayesParams, CanaryScoreAuditor, Split
    from dpaudit.attacks.canary import plan_multi_run_threshold

    mu = mu_for(eps)
    t0 = time.perf_counter()
    planned = plan_multi_run_threshold({"kind": "gaussian", "mu": mu}, n // 2, n - n // 2, delta=DELTA,
                                       confidence=CONF, seed=0)
    vals = {k: np.empty(seeds) for k in MULTI_RULES}
    miss = 0
    for s in range(seeds):
        rng = np.random.default_rng(np.random.SeedSequence([s, n, int(eps * 100), 0xB1]))
        inc = rng.random(n) < 0.5
        x = inc * mu + rng.standard_normal(n)
        a = CanaryScoreAuditor(x[inc], x[~inc])
        vals["multi-today"][s] = a.multi_run_eps(Split(0.5, s), delta=DELTA, confidence=CONF).epsilon
        vals["multi-gdp"][s] = a.multi_run_gdp(Split(0.25, s), delta=DELTA, confidence=CONF).epsilon
        vals["multi-gdp-planned"][s] = a.multi_run_gdp(planned, delta=DELTA, confidence=CONF).epsilon
        b = a.multi_run_bayes(Split(0.25, s), delta=DELTA, confidence=CONF, params=BayesParams(samples=4000, seed=s))
        vals["multi-bayes"][s] = b.epsilon
        miss += not (b.low <= eps <= b.high)
    out = {k: _stats(v, eps) for k, v in vals.items()}
    out["multi-bayes"]["failure_rate"] = miss / seeds      # credible interval misses the truth
    return {"eps": eps, "mu": mu, "n": n, "seeds": seeds, "rules": out, "planned_threshold": planned.thresholds[0],
            "seconds": round(time.perf_counter() - t0, 1)}


def _stats(v: np.ndarray, eps: float) -> dict:
    med = float(np.median(v))
    return {"median": med, "ratio": med / eps, "failure_rate": float(np.mean(v > eps * (1 + 1e-9))),
            "p10": float(np.quantile(v, 0.1)), "p90": float(np.quantile(v, 0.9))}


def ceilings() -> dict:
    """The most m canaries can certify at confidence 0.95, delta 1e-5: every canary guessed right."""
    from dpaudit.attacks.bounds import one_run_epsilon_batch
    from dpaudit.attacks.fdp import fdp_gdp_mu, gdp_epsilon

    out = {}
    for m in (1000, 2000, 10000):
        thm3 = float(one_run_epsilon_batch(m, [m], [m], delta=DELTA, alpha=1 - CONF)[0])
        thm3_0 = float(one_run_epsilon_batch(m, [m], [m], delta=0.0, alpha=1 - CONF)[0])
        mu = float(fdp_gdp_mu(m, m, m, confidence=CONF)[0])
        out[str(m)] = {"thm3": thm3, "thm3_delta0": thm3_0, "fdp_mu": mu, "fdp": gdp_epsilon(mu, DELTA)}
    return out


def markdown(res: dict) -> str:
    eps_cols = [f"ε = {e:g}" for e in EPSILONS]
    lines = []
    for m in CANARIES:
        rows = [r for r in res["one_run"] if r["m"] == m]
        lines += [f"One run, m = {m:,} canaries (δ = 1e-5, confidence 0.95, {rows[0]['seeds']} seeds): median bound "
                  "(× true ε; failure rate)", "",
                  "| rule | kind | " + " | ".join(eps_cols) + " |", "|---|---|" + "---|" * len(EPSILONS)]
        for k in ONE_RUN_RULES:
            cells = [f"{r['rules'][k]['median']:.2f} (×{r['rules'][k]['ratio']:.2f}; {100 * r['rules'][k]['failure_rate']:.1f}%)"
                     for r in rows]
            lines.append(f"| {LABELS[k]} | {KIND.get(k, 'certified')} | " + " | ".join(cells) + " |")
        lines.append("")
    for n in RUNS:
        rows = [r for r in res["multi_run"] if r["n"] == n]
        lines += [f"Multi-run, N = {n:,} runs ({rows[0]['seeds']} seeds): median (× true ε; failure rate, for the "
                  "estimate: credible interval missing the truth)", "",
                  "| rule | kind | " + " | ".join(eps_cols) + " |", "|---|---|" + "---|" * len(EPSILONS)]
        for k in MULTI_RULES:
            cells = [f"{r['rules'][k]['median']:.2f} (×{r['rules'][k]['ratio']:.2f}; {100 * r['rules'][k]['failure_rate']:.1f}%)"
                     for r in rows]
            lines.append(f"| {LABELS[k]} | {KIND.get(k, 'certified')} | " + " | ".join(cells) + " |")
        lines.append("")
    c = res["ceilings"]
    lines.append("Ceilings (every canary guessed right, confidence 0.95): Theorem 3 "
                 + ", ".join(f"m = {m}: {v['thm3']:.2f} (δ = 1e-5) / {v['thm3_delta0']:.2f} (δ = 0)" for m, v in c.items())
                 + "; f-DP with Gaussian curves " + ", ".join(f"m = {m}: μ {v['fdp_mu']:.2f}, ε {v['fdp']:.2f}"
                                                              for m, v in c.items()) + ".")
    return "\n".join(lines)


def dpsgd(seeds: list[int]) -> list[dict]:
    """The default audit's DP-SGD canary audit (digits MLP, 1000 Dirac canaries, accounted eps 8) under each
    analysis: the certified bound and the ideal-attack reference."""
    from dpaudit.auditing.canary_audit import CanaryAuditSpec, run_canary_spec

    out = []
    for seed in seeds:
        t0 = time.perf_counter()
        r = run_canary_spec(CanaryAuditSpec("dpsgd-eps8-one-run-whitebox", audit="one-run", canary="dirac",
                                            canaries=1000, epsilon=8.0), dataset="digits", seed=seed, delta=DELTA,
                            confidence=CONF)
        rows = [{"analysis": e.analysis, "rule": e.rule, "certified": e.epsilon, "mu": e.mu, "ideal": e.ideal_epsilon,
                 "assumption": e.assumption, "headline": e.analysis == r.bound.analysis and "issue 24" not in e.rule}
                for e in r.bound.analyses]
        ct = r.bound.curve_test
        out.append({"seed": seed, "accounted": r.accounted_epsilon, "headline": r.bound.analysis,
                    "certified": r.bound.epsilon, "ideal": r.bound.ideal_epsilon, "analyses": rows,
                    "curve_p_value": None if ct is None else ct.p_value,
                    "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--plan-replicates", type=int, default=21)
    ap.add_argument("--dpsgd", action="store_true", help="the default audit's DP-SGD canary audit (seeds 0-2) only")
    ap.add_argument("--out", type=Path, default=None, help="write power.json and power.md (or dpsgd.json) here")
    args = ap.parse_args(argv)
    if args.dpsgd:
        res_d = dpsgd([0, 1, 2])
        if args.out:
            from dpaudit._io import write_json

            write_json(args.out / "dpsgd.json", {"delta": DELTA, "confidence": CONF, "runs": res_d})
        return
    res: dict = {"delta": DELTA, "confidence": CONF, "one_run": [], "multi_run": [], "ceilings": ceilings()}
    for m in CANARIES:
        for e in EPSILONS:
            row = one_run_config(e, m, args.seeds, args.plan_replicates)
            print(json.dumps(row), flush=True)
            res["one_run"].append(row)
    for n in RUNS:
        for e in EPSILONS:
            row = multi_run_config(e, n, args.seeds)
            print(json.dumps(row), flush=True)
            res["multi_run"].append(row)
    md = markdown(res)
    print(md)
    if args.out:
        from dpaudit._io import write_json, write_text

        write_json(args.out / "power.json", res)
        write_text(args.out / "power.md", md + "\n")


if __name__ == "__main__":
    main()
