"""LiRA vs RMIA as the number of reference models grows (1, 2, 4, 8, 16, 64), on data that ships with dpaudit, and
one comparison table of every reference-model attack at 16 references (issue 25).

Setting (CPU scale): an MLP (one hidden layer of 128 units, Adam, no regularisation) on ``digits`` (sklearn's 8x8
images) or ``mnist1d`` (the procedural generator). ``--population`` records are held out of every model (RMIA's z).
On the remaining records D, ``2 * (pairs + targets / 2)`` models are trained in complementary pairs (each record
of D is IN exactly one model of each pair, so every model trains on about |D| / 2 records; the paired layout of
:func:`dpaudit.attacks.references.paired_inclusion`); the last ``targets`` models are the targets, the first
``2 * pairs`` the reference models. Every record of D is a target record of every target model (members: the
records it trained on), and the scores of the ``targets`` target models are pooled (as Carlini et al. do) for the
metrics, so TPR at 0.1% FPR rests on ``targets * |D| / 2`` non-members.

For K references:
* **online** attacks use the first K reference models (each record IN for K/2 of them);
* **offline** attacks use the first K pairs and, for each record, only the model of each pair that did not train on
  it: K OUT references per record (2K models trained). Offline RMIA's ``a`` is fitted on those references alone
  (:func:`dpaudit.attacks.rmia.fit_offline_a`); with K = 1 it cannot be (one model cannot be its own pseudo-target's
  reference), so K = 1 uses the ``a`` fitted with K = 2 -- one extra pair of trained models, as ML Privacy Meter's
  "paired model" does -- and the output says so.

Every attack is computed by :func:`dpaudit.attacks.compare.compare_signals` on the same reference models and targets.
Reference models are trained in checkpointed units (``--work``/units): a re-run recomputes only what is missing.
Every figure is an estimate (one model's records are coupled through the model), with stratified bootstrap
intervals over the pooled records.

Usage:
    python bench/bench_reference_sweep.py --dataset digits  --out reports/attacks   (about 10-20 min on 2 cores)
    python bench/bench_reference_sweep.py --dataset mnist1d --out reports/attacks
    python bench/bench_reference_sweep.py --dataset digits --pairs 4 --targets 2 --quick   (a smoke run)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit._io import dumps_json, write_text  # noqa: E402
from dpaudit.attacks.compare import compare_signals  # noqa: E402
from dpaudit.attacks.lira import logit_confidence  # noqa: E402
from dpaudit.attacks.metrics import attack_metrics, auc, tpr_at_fpr  # noqa: E402
from dpaudit.attacks.references import ReferenceSignals, paired_inclusion  # noqa: E402
from dpaudit.attacks.rmia import rmia_from_signals  # noqa: E402
from dpaudit.attacks.shadow import shadow_probabilities  # noqa: E402
from dpaudit.attacks.threshold import loss_scores  # noqa: E402
from dpaudit.executors import LocalExecutor, derive_seed  # noqa: E402

SWEEP = (1, 2, 4, 8, 16, 32, 64)
ONLINE = ("lira-online", "lira-online-fixed", "rmia-online")
OFFLINE = ("lira-offline", "lira-offline-fixed", "rmia-offline")
SETTINGS = {   # per data set: records, held-out population, model, training
    "digits": dict(num_samples=None, population=397, hidden=[128], epochs=40, batch_size=128, lr=3e-3),
    # 5000 records (the generator's default): 2000 for the models, 3000 population records, so that RMIA's score
    # resolves FPRs down to 1/3000 (digits has too few records: 397 population, 1/397 > 0.1%)
    "mnist1d": dict(num_samples=5000, population=3000, hidden=[128], epochs=40, batch_size=64, lr=5e-3),
}


def _recipe(spec, config):
    from dpaudit.training.ensemble import train_ensemble

    def train_many(datasets, seed):
        return train_ensemble(spec, list(datasets), config, seed=int(seed), progress=False).members()

    return train_many


def train_models(dataset: str, pairs: int, targets: int, seed: int, work: Path, quick: bool):
    """Train every model once (checkpointed) and return the per-record statistics and the layout."""
    from dpaudit.training.data import load_dataset
    from dpaudit.training.ensemble import TrainConfig
    from dpaudit.training.models import ModelSpec

    st = dict(SETTINGS[dataset])
    if quick:
        st.update(epochs=5)
    ds = load_dataset(dataset, seed=seed, num_samples=st["num_samples"])
    rng = np.random.default_rng(derive_seed(seed, "sweep-split"))
    perm = rng.permutation(len(ds))
    pop, D = np.sort(perm[:st["population"]]), np.sort(perm[st["population"]:])
    M = 2 * pairs + targets
    inc = paired_inclusion(len(D), M + (targets % 2), seed=derive_seed(seed, "sweep-inclusion"))[:, :M]
    spec = ModelSpec("mlp", ds.input_shape, ds.num_classes, {"hidden": st["hidden"]})
    config = TrainConfig(epochs=st["epochs"], batch_size=st["batch_size"], lr=st["lr"])
    datasets = [(ds.X[D[inc[:, k]]], ds.y[D[inc[:, k]]]) for k in range(M)]
    X_q = ds.X[np.r_[D, pop]]
    y_q = ds.y[np.r_[D, pop]]
    ex = LocalExecutor(progress=True).with_checkpoints(work / "units", salt=f"{dataset}-{st}-{seed}")
    t0 = time.perf_counter()
    probs = shadow_probabilities(datasets, [X_q] * M, batch_train_fn=_recipe(spec, config), seed=derive_seed(seed, "sweep-models"),
                                 executor=ex, label=f"{dataset} models")
    train_s = time.perf_counter() - t0
    L = np.stack([loss_scores(p, y_q) for p in probs], axis=1)
    PHI = np.stack([logit_confidence(p, y_q) for p in probs], axis=1)
    acc_in = float(np.mean([np.mean(p[:len(D)][inc[:, k]].argmax(1) == y_q[:len(D)][inc[:, k]]) for k, p in enumerate(probs)]))
    acc_out = float(np.mean([np.mean(p[:len(D)][~inc[:, k]].argmax(1) == y_q[:len(D)][~inc[:, k]]) for k, p in enumerate(probs)]))
    info = {"dataset": dataset, "records": int(len(ds)), "population": int(len(pop)), "target_records": int(len(D)),
            "models_trained": M, "reference_models": 2 * pairs, "target_models": targets, "model": f"mlp {st['hidden']}",
            "train": {k: st[k] for k in ("epochs", "batch_size", "lr")}, "train_seconds": train_s,
            "mean_train_accuracy": acc_in, "mean_heldout_accuracy": acc_out, "seed": seed}
    return ds, D, pop, inc, L, PHI, info


def _signals(L, PHI, inc, n, t, cols) -> ReferenceSignals:
    # population records leave out one model of each pair offline, as the targets do (see ReferenceSignals)
    pmask = paired_inclusion(len(L) - n, max(cols) + 1, seed=1)[:, cols]
    return ReferenceSignals(L[:n, t], PHI[:n, t], L[:n][:, cols], PHI[:n][:, cols], inc[:, cols], L[n:, t],
                            L[n:][:, cols], pmask, L[:n][:, cols], inc[:, cols], "online")


def sweep(L, PHI, inc, pairs: int, targets: int, ks, n_bootstrap: int, seed: int):
    n = inc.shape[0]
    tcols = list(range(2 * pairs, 2 * pairs + targets))
    pooled: dict[tuple[str, int, str], list] = {}
    afits: dict[tuple[int, int], float] = {}
    notes = []
    budgets = sorted({k for k in ks if k >= 2 and k <= 2 * pairs} | {2 * k for k in ks if 2 * k <= 2 * pairs})
    for t in tcols:
        member = inc[:, t]
        for B in budgets:
            sig = _signals(L, PHI, inc, n, t, list(range(B)))
            comp = compare_signals(sig, member, n_bootstrap=0, seed=seed)
            if comp.offline_a is not None:
                afits[(t, B // 2)] = comp.offline_a.a
            for name, s in comp.records.scores.items():
                if name in ONLINE and B in ks:
                    pooled.setdefault(("online", B, name), []).append((s, member))
                if name in OFFLINE and B // 2 in ks:
                    pooled.setdefault(("offline", B // 2, name), []).append((s, member))
                if name == "threshold" and B == budgets[0]:
                    pooled.setdefault(("none", 0, name), []).append((s, member))
            if "rmia-offline" in comp.skipped and B // 2 in ks:
                # K = 1: a cannot be fitted on one reference pair; use the a fitted with K = 2 (one extra pair)
                a2 = _signals(L, PHI, inc, n, t, list(range(min(4, 2 * pairs))))
                a = rmia_from_signals(a2, online=False).a
                r = rmia_from_signals(sig, online=False, a=a)
                pooled.setdefault(("offline", B // 2, "rmia-offline"), []).append((r.score, member))
                afits[(t, B // 2)] = a
                note = (f"offline K = {B // 2}: RMIA's a cannot be fitted on one reference model per record; the a "
                        "fitted with K = 2 is used (one extra pair of models).")
                if note not in notes:
                    notes.append(note)
    rows = []
    arrays = {key: (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
              for key, parts in pooled.items()}
    for (mode, K, name), parts in sorted(pooled.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        s = np.concatenate([p[0] for p in parts])
        mem = np.concatenate([p[1] for p in parts])
        m = attack_metrics(s[mem], s[~mem], fprs=(0.001, 0.01), n_bootstrap=n_bootstrap, seed=seed)
        iv = m.intervals
        row = {"mode": mode, "references": K, "attack": name, "auc": m.auc, "tpr@0.001": m.tpr_at(0.001),
               "tpr@0.01": m.tpr_at(0.01), "members": m.num_members, "nonmembers": m.num_nonmembers}
        for key in ("auc", "tpr@0.001", "tpr@0.01"):
            if key in iv:
                row[key + "_ci"] = [iv[key].low, iv[key].high]
        if name == "rmia-offline":
            row["a"] = sorted({v for (tt, k), v in afits.items() if k == K})
        if name.startswith("rmia-"):
            row["vs_lira"] = _paired_differences(arrays, mode, K, name, n_bootstrap, seed)
        rows.append(row)
    return rows, notes


def _paired_differences(arrays, mode: str, K: int, rmia_name: str, B: int, seed: int) -> dict:
    """RMIA minus the better LiRA variant (by TPR at 0.1% FPR) on the same pooled records: the point differences in
    TPR at 0.1% / 1% FPR and AUC with 95% percentile intervals from a paired, stratified bootstrap (the same
    resampled members and non-members for both attacks)."""
    liras = [n for n in (f"lira-{mode}", f"lira-{mode}-fixed") if (mode, K, n) in arrays]
    if not liras or B < 1:
        return {}
    s_r, mem = arrays[(mode, K, rmia_name)]
    best = max(liras, key=lambda n: tpr_at_fpr(arrays[(mode, K, n)][0][mem], arrays[(mode, K, n)][0][~mem], 0.001))
    s_l, mem_l = arrays[(mode, K, best)]
    if not np.array_equal(mem, mem_l):
        return {}
    pos, neg = np.flatnonzero(mem), np.flatnonzero(~mem)
    rng = np.random.default_rng(seed)
    stats = {"tpr@0.001": lambda s, p, q: tpr_at_fpr(s[p], s[q], 0.001),
             "tpr@0.01": lambda s, p, q: tpr_at_fpr(s[p], s[q], 0.01), "auc": lambda s, p, q: auc(s[p], s[q])}
    reps = {k: [] for k in stats}
    for _ in range(B):
        p, q = rng.choice(pos, pos.size), rng.choice(neg, neg.size)
        for k, f in stats.items():
            reps[k].append(f(s_r, p, q) - f(s_l, p, q))
    out: dict = {"lira": best}
    for k, f in stats.items():
        lo, hi = np.quantile(reps[k], [0.025, 0.975])
        out[k] = [f(s_r, pos, neg) - f(s_l, pos, neg), float(lo), float(hi)]
    return out


def _fmt(r, key):
    ci = r.get(key + "_ci")
    return f"{r[key]:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def headline(rows) -> list[list[str]]:
    """Per mode and K: RMIA minus the better LiRA variant (by TPR at 0.1% FPR) with the paired-bootstrap interval of
    the difference; "RMIA" / "LiRA" is ahead only when the interval excludes 0."""
    out = []
    for r in rows:
        d = r.get("vs_lira")
        if not d:
            continue
        cells = [r["mode"], str(r["references"]), d["lira"]]
        for key in ("tpr@0.001", "tpr@0.01", "auc"):
            est, lo, hi = d[key]
            who = "RMIA" if lo > 0 else "LiRA" if hi < 0 else "neither"
            cells += [f"{est:+.3f} [{lo:+.3f}, {hi:+.3f}]", who]
        out.append(cells)
    return sorted(out, key=lambda c: (c[0] != "online", int(c[1])))


def markdown(info, rows, notes, figure: str) -> str:
    out = [f"# Reference-model sweep: {info['dataset']} ({info['model']})", "",
           f"{info['target_models']} target models and {info['reference_models']} reference models, each trained on "
           f"about {info['target_records'] // 2} of {info['target_records']} records (paired layout; mean train accuracy "
           f"{info['mean_train_accuracy']:.3f}, held-out {info['mean_heldout_accuracy']:.3f}); {info['population']} "
           f"population records held out of every model; scores of the target models pooled. Every figure is an "
           "estimate (records are coupled through each model), with 95% stratified bootstrap intervals. Online K: the "
           "first K reference models (K/2 IN per record); offline K: K OUT reference models per record.", "",
           "## RMIA minus the better LiRA variant", "",
           "At each K, RMIA's figure minus that of the LiRA variant (per-record or pooled variance) with the higher TPR "
           "at 0.1% FPR, with the 95% interval of a paired stratified bootstrap over the pooled records (the same "
           "resample for both attacks); a side is \"ahead\" only when the interval excludes 0.", "",
           "| mode | K | better LiRA | Δ TPR @ 0.1% FPR | ahead | Δ TPR @ 1% FPR | ahead | Δ AUC | ahead |",
           "|---|---|---|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(c) + " |" for c in headline(rows)]
    out += ["", "## Every attack", "", "| mode | K | attack | AUC | TPR @ 0.1% FPR | TPR @ 1% FPR |",
            "|---|---|---|---|---|---|"]
    for r in rows:
        extra = f" (a = {', '.join(f'{v:g}' for v in r['a'])})" if r.get("a") else ""
        out.append(f"| {r['mode']} | {r['references']} | {r['attack']}{extra} | {_fmt(r, 'auc')} | "
                   f"{_fmt(r, 'tpr@0.001')} | {_fmt(r, 'tpr@0.01')} |")
    out += [""] + [f"- {n}" for n in notes] + ["", f"![TPR at 0.1% FPR and AUC against the number of references.]({figure})", ""]
    return "\n".join(out)


def figure(info, rows):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 7), layout="constrained")
    axes = fig.subplots(2, 2)
    for j, mode in enumerate(("online", "offline")):
        for i, key in enumerate(("tpr@0.001", "auc")):
            ax = axes[i, j]
            for name in (ONLINE if mode == "online" else OFFLINE):
                pts = sorted((r["references"], r[key], r.get(key + "_ci")) for r in rows
                             if r["mode"] == mode and r["attack"] == name)
                if not pts:
                    continue
                ks = [p[0] for p in pts]
                ys = [p[1] for p in pts]
                (line,) = ax.plot(ks, ys, marker="o", label=name)
                cis = [p[2] for p in pts]
                if all(c is not None for c in cis):
                    ax.fill_between(ks, [c[0] for c in cis], [c[1] for c in cis], alpha=0.15, color=line.get_color())
            thr = [r for r in rows if r["attack"] == "threshold"]
            if thr:
                ax.axhline(thr[0][key], color="grey", ls=":", label="threshold (no references)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel(f"reference models ({'per record: OUT only' if mode == 'offline' else 'K, K/2 IN per record'})")
            ax.set_ylabel("TPR at FPR 0.1%" if key != "auc" else "AUC")
            ax.set_title(f"{mode}: {'TPR @ 0.1% FPR' if key != 'auc' else 'AUC'}")
            ax.legend(fontsize=7)
    fig.suptitle(f"{info['dataset']}, {info['model']}: estimates pooled over {info['target_models']} target models")
    return fig


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(SETTINGS), default="digits")
    ap.add_argument("--pairs", type=int, default=64, help="Reference-model pairs (64: offline up to 64 per record).")
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--compare-references", type=int, default=16, help="References of the one comparison table.")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/sweep"))
    ap.add_argument("--work", type=Path, default=None, help="Checkpoints of the trained units (default runs/sweep/DATASET).")
    ap.add_argument("--quick", action="store_true", help="5 epochs: a smoke run of the script, not a result.")
    ap.add_argument("--render-only", action="store_true",
                    help="Re-write the Markdown and the figure from OUT/sweep_DATASET.json (no training).")
    args = ap.parse_args(argv)
    if args.render_only:
        import json

        name = f"sweep_{args.dataset}"
        d = json.loads((args.out / f"{name}.json").read_text())
        with open(args.out / f"{name}.png", "wb") as fh:
            figure(d["info"], d["rows"]).savefig(fh, format="png", dpi=110)
        write_text(args.out / f"{name}.md", markdown(d["info"], d["rows"], d["notes"], f"{name}.png"))
        print(f"wrote {args.out}/{name}.md/.png")
        return
    work = args.work or Path("runs/sweep") / args.dataset
    ds, D, pop, inc, L, PHI, info = train_models(args.dataset, args.pairs, args.targets, args.seed, work, args.quick)
    ks = tuple(k for k in SWEEP if k <= 2 * args.pairs)   # online up to 2 * pairs; offline up to pairs (sweep())
    t0 = time.perf_counter()
    rows, notes = sweep(L, PHI, inc, args.pairs, args.targets, ks, args.bootstrap, args.seed)
    info.update(attack_seconds=time.perf_counter() - t0, machine=platform.platform(), cores=os.cpu_count(),
                load_1min=os.getloadavg()[0], quick=bool(args.quick))
    out = args.out
    name = f"sweep_{args.dataset}"
    write_text(out / f"{name}.json", dumps_json({"schema": 1, "info": info, "rows": rows, "notes": notes}))
    from dpaudit.report.attack_outputs import write_comparison

    with open(out / f"{name}.png", "wb") as fh:
        figure(info, rows).savefig(fh, format="png", dpi=110)
    write_text(out / f"{name}.md", markdown(info, rows, notes, f"{name}.png"))
    # one comparison table: the first target model, the first --compare-references reference models
    t = 2 * args.pairs
    n = len(D)
    K = min(args.compare_references, 2 * args.pairs)
    comp = compare_signals(_signals(L, PHI, inc, n, t, list(range(K))), inc[:, t], record=D, labels=ds.y[D],
                           n_bootstrap=args.bootstrap, seed=args.seed)
    image = len(ds.input_shape) == 3 and ds.input_shape[1] >= 4 and ds.input_shape[2] >= 4
    write_comparison(out / f"{args.dataset}_mlp", comp,
                     title=f"Reference-model attacks on an MLP trained on {args.dataset} ({K} references)",
                     images_of=(lambda r: ds.X[r]) if image else None, extra={"setting": info})
    for r in rows:
        print(f"{r['mode']:<8} K={r['references']:<3} {r['attack']:<20} AUC {r['auc']:.3f}  TPR@0.1% {r['tpr@0.001']:.3f}"
              f"  TPR@1% {r['tpr@0.01']:.3f}")
    print(f"wrote {out}/{name}.json/.md/.png and {out}/{args.dataset}_mlp/ (train {info['train_seconds']:.0f} s, "
          f"attacks {info['attack_seconds']:.0f} s, load {info['load_1min']:.1f})")


if __name__ == "__main__":
    main()
