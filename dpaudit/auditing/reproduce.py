"""``dpaudit reproduce PAPER``: rerun the experiment grid a paper's claims rest on and write one table per paper.

Each row of the table is one setting (a method and its parameters) run over ``seeds`` seeds: the paper's number
(with the table or figure it comes from), dpaudit's reproduction (mean +- std over seeds), the accounted epsilon
(dpaudit's headline statement), the claimed epsilon (the release's claim: what the paper's analysis gives) and,
where it is run, the empirical epsilon of a loss-threshold attack on the first seed's release, with its kind (on
one model an *estimate*, never certified). Below the rows, each claim of the paper gets a verdict:

- ``reproduced``: the relation the paper states (A beats B, the accounting stays within the claim, ...) holds in
  the means of this run;
- ``not reproduced at this scale``: it does not hold here; at ``--scale cpu`` the data sets, model sizes and round
  counts are much smaller than the paper's, so this is not a refutation of the paper at its scale;
- ``not reproduced``: a relation that does not depend on scale (an accounting identity) fails;
- ``cannot be checked here``: an absolute number of the paper on a data set this run does not use.

``--scale cpu`` uses the offline data sets (digits, breast_cancer, ...) and small settings; ``--scale paper`` uses
the paper's data sets from ``--data-dir`` (the missing files are named before anything runs) and the paper's
configs under ``configs/``, and needs a GPU for reasonable time.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dpaudit._format import fmt_number
from dpaudit._io import check_output_folder, load_json_file, write_json, write_text
from dpaudit.errors import DataError, OutputError, ParameterError, check_bool, check_choice, check_int
from dpaudit.progress import Reporter, as_reporter

__all__ = ["PAPERS", "SCALES", "VERDICTS", "Setting", "PaperClaim", "Grid", "RowResult", "ClaimVerdict",
           "ReproductionTable", "paper_grid", "grid_settings", "reproduce", "check_data_files", "check_replace",
           "table_paths", "DEFAULT_OUT", "COMMITTED_OUT", "SETTINGS_HEAD", "CLAIMS_HEAD", "MAX_SEEDS"]

PAPERS = ("privatekt", "fedkt", "fredy", "proxyfl")
SCALES = ("cpu", "paper")
VERDICTS = ("reproduced", "not reproduced at this scale", "not reproduced", "cannot be checked here")

#: Where ``dpaudit reproduce`` writes its tables by default (scratch: git ignores ``runs/``), and the committed
#: tables, which change only with an explicit ``--out reports/reproduce``.
DEFAULT_OUT = Path("runs") / "reproduce"
COMMITTED_OUT = Path("reports") / "reproduce"

SETTINGS_HEAD = ("setting", "paper (source)", "dpaudit (mean ± std)", "accounted ε", "claimed ε", "empirical ε (kind)")
CLAIMS_HEAD = ("claim", "source", "verdict", "evidence")


@dataclass(frozen=True)
class Setting:
    """One row: ``method`` run with ``params`` (the TOML tables of ``dpaudit train``, merged over ``config_file``).

    ``metric`` is the utility key reported (``test_accuracy`` unless said); ``paper`` the paper's value of that
    metric (a fraction) at ``source`` (table/figure and setting), None where the paper gives none for this row.
    ``attack``: also run the loss-threshold attack on the first seed's release (its empirical epsilon)."""

    key: str
    label: str
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)
    metric: str = "test_accuracy"
    paper: float | None = None
    source: str = ""
    config_file: str | None = None
    attack: bool = False
    dataset: str | None = None  # None: the grid's first data set
    no_privacy: bool = False  # the row's metric is of a model without any privacy mechanism (baselines)


@dataclass(frozen=True)
class PaperClaim:
    """A claim of the paper and how to check it on the rows.

    ``kind``:
    - ``"greater"``: mean of row ``rows[0]`` > mean of ``rows[1]`` + ``margin``;
    - ``"not_worse"``: mean of ``rows[0]`` >= mean of ``rows[1]`` - ``margin``;
    - ``"accounting"``: the accounted epsilon of ``rows[0]`` does not exceed its claimed epsilon (scale-independent);
    - ``"attack_chance"``: the threshold attack on ``rows[0]``'s first release has AUC <= 0.5 + ``margin``;
    - ``"absolute"``: the paper's absolute number for ``rows[0]`` is within ``margin`` (checked only at the paper's
      scale on the paper's data; otherwise ``cannot be checked here``).
    """

    key: str
    text: str
    source: str
    kind: str
    rows: tuple[str, ...]
    margin: float = 0.0


@dataclass(frozen=True)
class Grid:
    paper: str
    title: str
    citation: str
    scale: str
    datasets: tuple[str, ...]
    settings: tuple[Setting, ...]
    claims: tuple[PaperClaim, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RowResult:
    setting: Setting
    values: tuple[float, ...]
    accounted_epsilon: float
    claimed_epsilon: float
    empirical_epsilon: float | None = None
    empirical_kind: str | None = None
    seconds: float = 0.0
    attack_auc: float | None = None

    @property
    def mean(self) -> float:
        return float(statistics.fmean(self.values)) if self.values else math.nan

    @property
    def std(self) -> float:
        return float(statistics.stdev(self.values)) if len(self.values) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        s = self.setting
        return {"key": s.key, "label": s.label, "method": s.method, "params": _jsonable(s.params), "metric": s.metric,
                "paper": s.paper, "source": s.source, "values": list(self.values), "mean": self.mean, "std": self.std,
                "accounted_epsilon": _num(self.accounted_epsilon), "claimed_epsilon": _num(self.claimed_epsilon),
                "empirical_epsilon": None if self.empirical_epsilon is None else _num(self.empirical_epsilon),
                "empirical_kind": self.empirical_kind, "attack_auc": self.attack_auc, "seconds": round(self.seconds, 1)}


@dataclass(frozen=True)
class ClaimVerdict:
    claim: PaperClaim
    verdict: str
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        c = self.claim
        return {"key": c.key, "claim": c.text, "source": c.source, "kind": c.kind, "rows": list(c.rows),
                "verdict": self.verdict, "evidence": self.evidence}


@dataclass(frozen=True)
class ReproductionTable:
    grid: Grid
    seeds: tuple[int, ...]
    rows: tuple[RowResult, ...]
    verdicts: tuple[ClaimVerdict, ...]
    seconds: float
    #: The root the tables were written under (``--out``), when not the default: the Markdown's "Made by" says it.
    out: str | None = None

    def to_dict(self) -> dict[str, Any]:
        g = self.grid
        return {"paper": g.paper, "title": g.title, "citation": g.citation, "scale": g.scale, "datasets": list(g.datasets),
                "seeds": list(self.seeds), "seconds": round(self.seconds, 1), "notes": list(g.notes),
                "rows": [r.to_dict() for r in self.rows], "claims": [v.to_dict() for v in self.verdicts]}

    def setting_rows(self) -> list[list[str]]:
        """One row per setting under :data:`SETTINGS_HEAD` (the Markdown table and the console's)."""
        rows = []
        for r in self.rows:
            s = r.setting
            paper = "–" if s.paper is None else f"{s.paper:.3f}"
            emp = "–" if r.empirical_epsilon is None else (f"{_fmt(r.empirical_epsilon)} ({r.empirical_kind}; "
                                                            f"AUC {r.attack_auc:.3f})")
            rows.append([s.label, f"{paper} ({s.source or 'no number in the paper'})",
                         f"{r.mean:.3f} ± {r.std:.3f} ({s.metric})", _fmt(r.accounted_epsilon), _fmt(r.claimed_epsilon),
                         emp])
        return rows

    def claim_rows(self) -> list[list[str]]:
        """One row per claim of the paper under :data:`CLAIMS_HEAD`."""
        return [[v.claim.text, v.claim.source, v.verdict, v.evidence] for v in self.verdicts]

    def to_markdown(self) -> str:
        g = self.grid
        lines = [f"# Reproduction: {g.title}", "", f"{g.citation}", "",
                 f"Scale: **{g.scale}** (data: {', '.join(g.datasets)}); seeds: {', '.join(map(str, self.seeds))}; "
                 f"wall time {self.seconds:.0f} s. Made by `dpaudit reproduce {g.paper} --scale {g.scale} "
                 f"--seeds {len(self.seeds)}{'' if self.out is None else ' --out ' + self.out}`.", ""]
        lines += [f"- {n}" for n in g.notes] + ([""] if g.notes else [])
        lines += ["## Settings", "", "| " + " | ".join(SETTINGS_HEAD) + " |", "|---" * len(SETTINGS_HEAD) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.setting_rows()]
        lines += ["", "## Claims", "", "| " + " | ".join(CLAIMS_HEAD) + " |", "|---" * len(CLAIMS_HEAD) + "|"]
        lines += [f"| {text} | {source} | **{verdict}** | {evidence} |"
                  for text, source, verdict, evidence in self.claim_rows()]
        lines += ["", NOTE, ""]
        return "\n".join(lines)


#: What the table's ε columns mean (below the Markdown table and the console's).
NOTE = ("Accounted ε: dpaudit's headline statement for the run's released model (∞ where no finite guarantee is "
        "established, and for baselines without a privacy mechanism). Claimed ε: what the paper's analysis gives for "
        "the same run. Empirical ε: a loss-threshold membership attack on the first seed's release; on one model it "
        "is an estimate, never a certified bound.")


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else ("inf" if x > 0 else "nan")


def _fmt(x: float) -> str:
    return "–" if math.isnan(x) else fmt_number(x, 3)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------------
# The grids
# --------------------------------------------------------------------------------------------------

def _privatekt(scale: str) -> Grid:
    cite = "Qi et al., \"Differentially private knowledge transfer for federated learning\", Nat. Commun. 14 (2023)"
    if scale == "cpu":
        ds, base, cfg = "digits", {}, None
        notes = ("CPU scale: digits (1,797 8x8 images), dpaudit's small defaults (10 clients, 60 rounds, MLP); the "
                 "paper: MNIST, 80 clients x 600, "
                 "500 rounds, a CNN. The paper's Fig. 2-4 values are plotted, not printed (only Fig. 4's 'around 94% "
                 "at eps = 2' is in the text): its claims are checked as relations between settings.",)
    else:
        ds, base, cfg = "mnist", {}, "configs/privatekt.toml"
        notes = ("Paper scale: configs/privatekt.toml (reference code's settings: SGD lr 0.05, 600 records per client).",)
    part = {"iid": {"partition": "iid"}, "class": {"partition": "dirichlet_fixed" if scale == "paper" else "dirichlet",
                                                  "alpha": 0.5},
            "size": {"partition": "size_skew", "size_beta": 0.5}, "mixed": {"partition": "mixed", "alpha": 0.5,
                                                                              "size_beta": 0.5}}
    if scale == "paper":  # the size skews cannot keep 600 records per client
        part["size"]["samples_per_client"] = part["mixed"]["samples_per_client"] = None

    def s(key, label, method, data=None, method_params=None, **kw):
        p = {"data": {**base.get("data", {}), **(data or {})}, "method": {**base.get("method", {}), **(method_params or {})}}
        return Setting(key, label, method, p, config_file=None if method != "privatekt" else cfg, **kw)

    settings = [
        s("pkt_iid", "PrivateKT, IID, eps=5", "privatekt", part["iid"], attack=True),
        s("pkt_class", "PrivateKT, class non-IID, eps=5", "privatekt", part["class"], attack=True),
        s("pkt_size", "PrivateKT, size non-IID, eps=5", "privatekt", part["size"]),
        s("pkt_mixed", "PrivateKT, mixed non-IID, eps=5", "privatekt", part["mixed"]),
        s("fedavg_class", "FedAvg + LDP, class non-IID, eps=5", "fedavg-ldp", part["class"]),
        s("fedmd_class", "FedMD + LDP, class non-IID, eps=5", "fedmd-ldp", part["class"]),
        s("centrain", "CenTrain (no privacy)", "centrain", {}, no_privacy=True),
        s("pkt_nobuf", "PrivateKT without buffer (class non-IID)", "privatekt", part["class"], {"use_buffer": False}),
        s("pkt_uniform", "PrivateKT, uniform sampling (class non-IID)", "privatekt", part["class"],
          {"importance_sampling": False}),
        s("pkt_noself", "PrivateKT without self-training (class non-IID)", "privatekt", part["class"],
          {"self_training": False}),
        s("pkt_eps2", "PrivateKT, class non-IID, eps=2", "privatekt", part["class"], {"epsilon": 2.0}),
    ]
    if scale == "paper":  # the only PrivateKT number printed in the text (Fig. 2-4 are bar/line charts)
        settings = [replace(x, paper=0.94, source="Fig. 4 (text: 'around 94% ... eps = 2', MNIST)")
                    if x.key == "pkt_eps2" else x for x in settings]
    claims = [
        PaperClaim("ldp_beats_fedavg", "Under LDP (eps=5) PrivateKT beats FedAvg+LDP", "Fig. 2", "greater",
                   ("pkt_class", "fedavg_class")),
        PaperClaim("ldp_beats_fedmd", "Under LDP (eps=5) PrivateKT beats FedMD+LDP", "Fig. 2", "greater",
                   ("pkt_class", "fedmd_class")),
        PaperClaim("size_skew", "PrivateKT keeps its accuracy under size non-IID (within 0.05 of IID)", "Fig. 2",
                   "not_worse", ("pkt_size", "pkt_iid"), 0.05),
        PaperClaim("mixed_skew", "PrivateKT keeps its accuracy under mixed non-IID (within 0.05 of IID)", "Fig. 2",
                   "not_worse", ("pkt_mixed", "pkt_iid"), 0.05),
        PaperClaim("buffer", "The knowledge buffer improves accuracy", "Fig. 3", "greater", ("pkt_class", "pkt_nobuf")),
        PaperClaim("importance", "Importance sampling beats uniform sampling", "Fig. 3", "greater",
                   ("pkt_class", "pkt_uniform")),
        PaperClaim("selftrain", "Self-training improves accuracy", "Fig. 3", "greater", ("pkt_class", "pkt_noself")),
        PaperClaim("eps2", "eps=2 does not seriously hurt accuracy (within 0.05 of eps=5)", "Fig. 4", "not_worse",
                   ("pkt_eps2", "pkt_class"), 0.05),
        PaperClaim("mnist_accuracy", "About 94% accuracy on MNIST at eps=2", "Fig. 4 (text)", "absolute",
                   ("pkt_eps2",), 0.02),
        PaperClaim("shuffling", "The whole process is eps-LDP (eps=5), 'model shuffling' stopping accumulation over "
                   "rounds", "Methods, privacy analysis", "accounting", ("pkt_class",)),
    ]
    return Grid("privatekt", "PrivateKT (Fig. 2-4)", cite, scale, (ds,), tuple(settings), tuple(claims), notes)


def _fedkt(scale: str) -> Grid:
    cite = "Li, He, Song, \"Practical one-shot federated learning for cross-silo setting\" (FedKT), IJCAI 2021"
    if scale == "cpu":
        tab = "breast_cancer"
        notes = ("CPU scale: digits (MLP) for Table 1 and breast_cancer (random forests) for Tables 8-9; the paper: "
                 "Adult, cod-rna, MNIST, SVHN.",)
        l0: dict[str, Any] = {}  # dpaudit's small FedKT defaults (MLP teachers, level L0)
        t1 = [Setting("fedkt_l0", "FedKT-L0 (digits, MLP)", "fedkt", l0, source="", attack=True),
              Setting("solo", "SOLO (digits)", "fedkt", l0, metric="solo_accuracy", no_privacy=True),
              Setting("pate", "PATE, centralised, noiseless (digits)", "fedkt", l0, metric="pate_accuracy", no_privacy=True)]
        rf = {"n_estimators": 30, "max_depth": 6}  # Table 8's forests have 100 trees of depth 6
        tree = {"teacher_model": "random_forest", "teacher_model_kwargs": rf, "student_model": "random_forest",
                "student_model_kwargs": rf, "final_model": "random_forest", "final_model_kwargs": rf,
                "partitions": 1, "teachers": 5, "baselines": []}
        trees = [Setting("l1_g04", "FedKT-L1, gamma=0.04 (breast_cancer, RF)", "fedkt",
                         {"method": {**tree, "level": "L1", "gamma": 0.04}}),
                 Setting("l1_g08", "FedKT-L1, gamma=0.08 (breast_cancer, RF)", "fedkt",
                         {"method": {**tree, "level": "L1", "gamma": 0.08}}),
                 Setting("l2_g04", "FedKT-L2, gamma=0.04 (breast_cancer, RF)", "fedkt",
                         {"method": {**tree, "level": "L2", "gamma": 0.04, "teachers": 5}}),
                 Setting("l0_tree", "FedKT-L0 (breast_cancer, RF)", "fedkt", {"method": {**tree, "level": "L0"}})]
        trees = [replace(t, dataset=tab) for t in trees]
        datasets = ("digits", tab)
    else:
        t1 = [Setting("fedkt_l0", "FedKT-L0 (MNIST, MLP)", "fedkt", {}, paper=0.905, source="Table 1 (MNIST)",
                      config_file="configs/fedkt_paper_mnist.toml", attack=True),
              Setting("solo", "SOLO (MNIST)", "fedkt", {}, metric="solo_accuracy", paper=0.690, source="Table 1 (MNIST)",
                      config_file="configs/fedkt_paper_mnist.toml", no_privacy=True),
              Setting("pate", "PATE, centralised, noiseless (MNIST)", "fedkt", {}, metric="pate_accuracy", paper=0.927,
                      source="Table 1 (MNIST)", config_file="configs/fedkt_paper_mnist.toml", no_privacy=True)]
        adult = "configs/fedkt_paper_adult.toml"
        trees = [Setting("l1_g04", "FedKT-L1, gamma=0.04, 1% queries (Adult)", "fedkt", {"method": {"gamma": 0.04}},
                         paper=0.802, source="Table 8 (Adult, heterogeneous, eps 4.73)", config_file=adult),
                 Setting("l1_g08", "FedKT-L1, gamma=0.08, 1% queries (Adult)", "fedkt", {"method": {"gamma": 0.08}},
                         paper=0.803, source="Table 8 (Adult, heterogeneous, eps 7)", config_file=adult),
                 Setting("l2_g04", "FedKT-L2, gamma=0.04, 1% queries (Adult)", "fedkt",
                         {"method": {"gamma": 0.04, "level": "L2", "parties": 20, "teachers": 25}}, paper=0.785,
                         source="Table 9 (Adult, heterogeneous, eps 3.72)", config_file=adult),
                 Setting("l0_tree", "FedKT-L0 (Adult)", "fedkt", {"method": {"level": "L0"}}, paper=0.822,
                         source="Table 8 (Adult, FedKT-L0)", config_file=adult)]
        trees = [replace(t, dataset="adult") for t in trees]
        datasets = ("mnist", "adult")
        notes = ("Paper scale: configs/fedkt_paper_mnist.toml and configs/fedkt_paper_adult.toml; cod-rna and SVHN "
                 "rows of Table 1 are not run (no loader yet).",)
    claims = (
        PaperClaim("beats_solo", "FedKT beats SOLO by a wide margin in one round", "Table 1", "greater", ("fedkt_l0", "solo")),
        PaperClaim("close_to_pate", "FedKT is close to the centralised PATE upper bound (within 0.05)", "Table 1",
                   "not_worse", ("fedkt_l0", "pate"), 0.05),
        PaperClaim("l1_noise_tradeoff", "Less noise (larger gamma) does not lower FedKT-L1's accuracy", "Table 8",
                   "not_worse", ("l1_g08", "l1_g04"), 0.02),
        PaperClaim("l1_close_to_l0", "FedKT-L1 is comparable to the non-private version (within 0.05)", "Tables 8-9 (text)",
                   "not_worse", ("l1_g08", "l0_tree"), 0.05),
        PaperClaim("l1_accounting", "FedKT-L1's party-level epsilon as the paper computes it is a valid bound",
                   "Table 8, Theorems 9-10", "accounting", ("l1_g04",)),
        PaperClaim("l2_accounting", "FedKT-L2's example-level epsilon as the paper computes it is a valid bound",
                   "Table 9, Theorem 8", "accounting", ("l2_g04",)),
        PaperClaim("mnist_accuracy", "FedKT reaches 90.5% on MNIST", "Table 1", "absolute", ("fedkt_l0",), 0.02),
    )
    return Grid("fedkt", "FedKT (Tables 1, 8, 9)", cite, scale, datasets, tuple(t1 + trees), claims, notes)


def _fredy(scale: str) -> Grid:
    cite = "FREDY, Future Internet 15 (2023): federated teachers, Laplace noisy labels, shadow-model MIA (Table 2)"
    if scale == "cpu":
        ds, cfg = "digits", None
        base: dict[str, Any] = {"method": {"nonprivate_baseline": False}}
        notes = ("CPU scale: digits, 5 teachers, 3 FedAvg rounds, MLP; the paper: CIFAR-10 / MNIST, 25 teachers, "
                 "10 rounds, a CNN. Attack figures: dpaudit's loss-threshold attack (the paper's Table 2 uses a "
                 "shadow-model attack; its accuracies are shown for the metric 'attack accuracy').",)
    else:
        ds, cfg = "mnist", "configs/fredy_paper_mnist.toml"
        base = {"method": {"nonprivate_baseline": False}}
        notes = ("Paper scale: configs/fredy_paper_mnist.toml (the paper's Table 2 is on CIFAR-10).",)

    def s(key, label, method_params, **kw):
        return Setting(key, label, "fredy", {"method": {**base["method"], **method_params}}, config_file=cfg, **kw)

    settings = (
        s("baseline", "non-private baseline", {"nonprivate_baseline": True, "gamma": 1.0}, metric="nonprivate_accuracy",
          no_privacy=True),
        s("g1", "FREDY gamma=1.0", {"gamma": 1.0}, attack=True),
        s("g05", "FREDY gamma=0.5", {"gamma": 0.5}),
        s("g02", "FREDY gamma=0.2", {"gamma": 0.2}, attack=True),
        s("g01", "FREDY gamma=0.1", {"gamma": 0.1}),
        s("g02_q500", "FREDY gamma=0.2, 500 queries" if scale == "paper" else "FREDY gamma=0.2, 100 queries",
          {"gamma": 0.2, "queries": 500 if scale == "paper" else 100}),
        s("g02_t15", "FREDY gamma=0.2, 15 teachers" if scale == "paper" else "FREDY gamma=0.2, 10 teachers",
          {"gamma": 0.2, "teachers": 15 if scale == "paper" else 10}),
    )
    if scale == "paper":  # the paper's MNIST numbers (Sec. 5 text; Fig. 6-7)
        numbers = {"baseline": (0.992, "Sec. 5 text (MNIST baseline 99.2%)"),
                   "g02": (0.932, "Sec. 5 text / Fig. 7 (MNIST, gamma=0.2: 93.2%)")}
        settings = tuple(replace(x, paper=numbers[x.key][0], source=numbers[x.key][1]) if x.key in numbers else x
                         for x in settings)
    claims = (
        PaperClaim("noise_costs_accuracy", "More noise (smaller gamma) costs student accuracy", "Fig. 7", "greater",
                   ("g1", "g01")),
        PaperClaim("fewer_queries_better", "Fewer queries give higher student accuracy at gamma=0.2", "Fig. 6a", "not_worse",
                   ("g02_q500", "g02"), 0.0),
        PaperClaim("more_teachers_better", "More teachers compensate for the noise", "Fig. 6b / Fig. 7", "greater",
                   ("g02_t15", "g02")),
        PaperClaim("mia_chance", "The membership attack on the student is at chance at gamma=0.2 (paper: attack "
                   "accuracy 0.50 vs 0.71 on the baseline)", "Table 2", "attack_chance", ("g02",), 0.05),
        PaperClaim("guarantee", "The PATE-style per-query guarantee holds for FedAvg-trained teachers", "Sec. 3-4",
                   "accounting", ("g02",)),
        PaperClaim("mnist_accuracy", "93.2% student accuracy on MNIST at gamma=0.2", "Sec. 5", "absolute", ("g02",), 0.02),
    )
    return Grid("fredy", "FREDY (Table 2, Fig. 6-7)", cite, scale, (ds,), settings, claims, notes)


def _proxyfl(scale: str) -> Grid:
    cite = "Kalra et al., \"Decentralized federated learning through proxy model sharing\", Nat. Commun. 14 (2023)"
    if scale == "cpu":
        ds, cfg = "digits", None
        base: dict[str, Any] = {"method": {"rounds": 20}}
        mixed_priv = {"private_model": "mlp", "private_kwargs": {"hidden": [32]}}
        notes = ("CPU scale: digits, 8 clients x 90 records, 20 rounds, MLP proxy [100]; the paper: MNIST / "
                 "Fashion-MNIST / CIFAR-10, 8 x 1000, 300 rounds. Accuracy: the private models' mean for "
                 "ProxyFL/FML, the shared models' mean otherwise (as the paper reports).",
                 "The paper's Fig. 3 / Fig. 5 values are plotted, not printed: its claims are checked as relations.")
    else:
        ds, cfg = "mnist", "configs/proxyfl.toml"
        base = {}
        mixed_priv = {"private_model": "cnn2_proxyfl", "private_kwargs": {"variant": "reference"}}
        notes = ("Paper scale: configs/proxyfl.toml (proxy MLP 200-200, private LeNet5 as the reference code).",
                 "The paper's Fig. 3 / Fig. 5 values are plotted, not printed: its claims are checked as relations.")

    def s(key, label, method, params=None, **kw):
        p = {"method": {**base.get("method", {}), **(params or {})}}
        return Setting(key, label, method, p, config_file=cfg, **kw)

    settings = (
        s("proxyfl", "ProxyFL (private models)", "proxyfl", metric="private_accuracy_mean", attack=True),
        s("proxyfl_proxy", "ProxyFL (shared proxies)", "proxyfl", metric="proxy_accuracy_mean"),
        s("fml", "FML (private models)", "fml", metric="private_accuracy_mean"),
        s("fedavg", "FedAvg (DP-SGD)", "fedavg-dpsgd", metric="proxy_accuracy_mean"),
        s("avgpush", "AvgPush", "avgpush", metric="proxy_accuracy_mean"),
        s("cwt", "CWT", "cwt", metric="proxy_accuracy_mean"),
        s("regular", "Regular (local DP-SGD)", "regular", metric="proxy_accuracy_mean", attack=True),
        s("joint", "Joint (pooled, DP-SGD)", "joint", metric="proxy_accuracy_mean"),
        s("proxyfl_mixed", "ProxyFL, other private architecture (" + mixed_priv["private_model"] + ")", "proxyfl",
          mixed_priv, metric="private_accuracy_mean"),
    )
    claims = (
        PaperClaim("private_best", "ProxyFL's private models beat FML's (its centralised counterpart)", "Fig. 3", "greater",
                   ("proxyfl", "fml")),
        PaperClaim("beats_regular", "ProxyFL's private models beat Regular", "Fig. 3", "greater", ("proxyfl", "regular")),
        PaperClaim("beats_fedavg", "ProxyFL's private models beat FedAvg", "Fig. 3", "greater", ("proxyfl", "fedavg")),
        PaperClaim("avgpush_fedavg", "AvgPush outperforms FedAvg under DP", "Fig. 3", "not_worse", ("avgpush", "fedavg"), 0.0),
        PaperClaim("mixed_arch", "ProxyFL works with heterogeneous private architectures (beats Regular)", "Fig. 5b",
                   "greater", ("proxyfl_mixed", "regular")),
        PaperClaim("dp_guarantee", "The shared proxy is (eps, delta)-DP by DP-SGD accounting", "Methods, Privacy",
                   "accounting", ("proxyfl",)),
    )
    return Grid("proxyfl", "ProxyFL (Fig. 3, Fig. 5b)", cite, scale, (ds,), settings, claims, notes)


_GRIDS: dict[str, Callable[[str], Grid]] = {"privatekt": _privatekt, "fedkt": _fedkt, "fredy": _fredy, "proxyfl": _proxyfl}


def paper_grid(paper: str, scale: str = "cpu") -> Grid:
    """The experiment grid of ``paper`` at ``scale``."""
    check_choice(paper, "paper", "dpaudit reproduce", PAPERS)
    check_choice(scale, "scale", "dpaudit reproduce", SCALES)
    return _GRIDS[paper](scale)


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------

def check_data_files(grid: Grid, data_dir: str | Path | None) -> None:
    """At paper scale: every data set of the grid must load from ``data_dir``; the error names the missing files."""
    if grid.scale != "paper":
        return
    if data_dir is None:
        raise ParameterError(f"The 'data_dir' parameter of dpaudit reproduce must be set with --scale paper "
                             f"(the {grid.paper} grid needs {', '.join(grid.datasets)}). Got None instead.")
    from dpaudit.training.data import load_dataset

    missing = []
    for name in grid.datasets:
        try:
            load_dataset(name, data_dir=data_dir)
        except DataError as exc:
            missing.append(str(exc))
    if missing:
        raise DataError(f"dpaudit reproduce {grid.paper} --scale paper: " + " ".join(missing))


def _config_path(path: str | None) -> Path | None:
    """A paper config (``configs/...``): as given when it exists, else beside the source tree's ``dpaudit``."""
    if path is None or Path(path).exists():
        return None if path is None else Path(path)
    beside = Path(__file__).resolve().parents[2] / path
    if beside.exists():
        return beside
    raise DataError(f"dpaudit reproduce: the paper config {path} was not found (run from a dpaudit checkout, whose "
                    "configs/ directory holds it).")


def _row_dataset(grid: Grid, setting: Setting) -> str:
    return setting.dataset or grid.datasets[0]


def _empirical(release: Path, delta: float, seed: int) -> tuple[float, str, float]:
    from dpaudit.auditing.attack_release import attack_release

    rep = attack_release(release, attack="threshold", n_bootstrap=0, blind=False, delta=delta, seed=seed)
    return float(rep.attack.bound.epsilon), str(rep.attack.bound.kind), float(rep.attack.metrics.auc)


def _verdict(claim: PaperClaim, rows: Mapping[str, RowResult], scale: str) -> ClaimVerdict:
    r = [rows[k] for k in claim.rows]
    if claim.kind == "accounting":
        a, c = r[0].accounted_epsilon, r[0].claimed_epsilon
        ok = a <= c * (1 + 1e-9)
        return ClaimVerdict(claim, "reproduced" if ok else "not reproduced",
                            f"accounted ε = {_fmt(a)} vs claimed ε = {_fmt(c)} ({r[0].setting.label})")
    if claim.kind == "attack_chance":
        auc = r[0].attack_auc
        if auc is None:
            return ClaimVerdict(claim, "cannot be checked here", "no attack was run on this setting")
        ok = auc <= 0.5 + claim.margin
        return ClaimVerdict(claim, "reproduced" if ok else "not reproduced at this scale",
                            f"threshold attack AUC {auc:.3f} on {r[0].setting.label} (chance 0.5, tolerance "
                            f"{claim.margin:g}; an estimate on one model)")
    if claim.kind == "absolute":
        s = r[0].setting
        if scale != "paper" or s.paper is None:
            return ClaimVerdict(claim, "cannot be checked here",
                                f"the paper's number is for its data set; this run uses {scale}-scale data")
        ok = abs(r[0].mean - s.paper) <= claim.margin
        return ClaimVerdict(claim, "reproduced" if ok else "not reproduced at this scale",
                            f"{r[0].mean:.3f} vs paper {s.paper:.3f} (tolerance {claim.margin:g})")
    a, b = r[0], r[1]
    ok = a.mean > b.mean + claim.margin if claim.kind == "greater" else a.mean >= b.mean - claim.margin
    rel = ">" if claim.kind == "greater" else "≥"
    bound = f" + {claim.margin:g}" if claim.kind == "greater" and claim.margin else (
        f" − {claim.margin:g}" if claim.margin else "")
    return ClaimVerdict(claim, "reproduced" if ok else "not reproduced at this scale",
                        f"{a.setting.label}: {a.mean:.3f} ± {a.std:.3f} {rel} {b.setting.label}: {b.mean:.3f} ± "
                        f"{b.std:.3f}{bound}: {'yes' if ok else 'no'}")


def table_paths(paper: str, out: str | Path | None = None) -> tuple[Path, Path]:
    """The Markdown and JSON tables of ``paper`` under the root ``out`` (default :data:`DEFAULT_OUT`):
    ``OUT/<paper>/<paper>.md`` and ``.json``."""
    folder = (DEFAULT_OUT if out is None else Path(out)) / paper
    return folder / f"{paper}.md", folder / f"{paper}.json"


def check_replace(grid: Grid, seeds: int, json_path: str | Path) -> None:
    """Refuse (:class:`~dpaudit.errors.OutputError`) to replace the table at ``json_path`` with a poorer one: fewer
    seeds, fewer settings (``--only``) or another scale than it was made with. Nothing there: nothing to check."""
    path = Path(json_path)
    if not path.exists():
        return
    try:
        old = load_json_file(path, "the reproduction table")
        old_seeds, old_scale = len(old["seeds"]), str(old["scale"])
        old_keys = [str(r["key"]) for r in old["rows"]]
    except (DataError, KeyError, TypeError) as exc:
        raise OutputError(f"dpaudit reproduce would replace {path}, which is not a reproduction table it can read "
                          f"({exc}); pass --force to replace it, or choose another --out.") from None
    lost = []
    if seeds < old_seeds:
        lost.append(f"{old_seeds} seeds, this run {seeds}")
    missing = [k for k in old_keys if k not in {st.key for st in grid.settings}]
    if missing:
        lost.append(f"settings {', '.join(missing)} that this run (--only) leaves out")
    if old_scale != grid.scale:
        lost.append(f"scale {old_scale}, this run {grid.scale}")
    if lost:
        raise OutputError(f"dpaudit reproduce refuses to replace the table at {path} with a poorer one (it has "
                          f"{'; '.join(lost)}): pass --force to replace it, or choose another --out (the default, "
                          f"{DEFAULT_OUT}, is scratch space).")


#: The most seeds a reproduction runs per setting (each seed trains every setting's method once: a hundred seeds of
#: the cpu grid is already days of work; a larger count is a typo, refused before anything runs).
MAX_SEEDS = 100


def reproduce(paper: str, *, scale: str = "cpu", data_dir: str | Path | None = None, seeds: int = 5,
              out: str | Path | None = None, work_dir: str | Path | None = None, device: str | None = None,
              attacks: bool = True, grid: Grid | None = None, force: bool = False,
              progress: bool | Reporter = True) -> ReproductionTable:
    """Run ``paper``'s grid at ``scale`` over seeds ``0 .. seeds-1`` and write ``OUT/<paper>/<paper>.md`` and
    ``.json`` (:func:`table_paths`; ``out`` default :data:`DEFAULT_OUT`, scratch; the committed tables are
    ``out = "reports/reproduce"``); the releases go to ``work_dir`` (default ``runs/reproduce/<paper>``, scratch).
    A table already there made with more seeds, more settings or at another scale is not replaced unless
    ``force`` (checked before anything runs). Teachers shared across settings are trained once
    (``shared_stages``). ``grid`` replaces the built-in grid (tests use a tiny one)."""
    from dpaudit.training.methods import run_method
    from dpaudit.training.methods.common import shared_stages

    n_seeds = check_int(seeds, "seeds", "dpaudit reproduce", low=1, high=MAX_SEEDS)
    force = check_bool(force, "force", "dpaudit reproduce")
    g = grid if grid is not None else paper_grid(paper, scale)
    md_path, json_path = table_paths(g.paper, out)
    work = Path(work_dir) if work_dir is not None else Path("runs") / "reproduce" / g.paper
    # the output rule of every command: no folder written through a symbolic link (checked before anything runs)
    for folder, what in ((md_path.parent.parent, "--out"), (md_path.parent, "--out"), (work, "the work folder")):
        check_output_folder(folder, what)
    if not force:
        check_replace(g, n_seeds, json_path)
    check_data_files(g, data_dir)
    rep = as_reporter(progress, prefix=f"dpaudit reproduce {g.paper}")
    t0 = time.perf_counter()
    rows: dict[str, RowResult] = {}
    runs: dict[str, Any] = {}  # settings that differ only in the metric read (FedKT, SOLO, PATE) share their runs
    with shared_stages(work / "shared_stages"), \
            rep.stage(f"{g.paper}: {len(g.settings)} settings x {n_seeds} seed(s)", total=len(g.settings) * n_seeds) as stage:
        for i, s in enumerate(g.settings):
            t1 = time.perf_counter()
            values, acc, claimed, emp = [], [], [], (None, None, None)
            for seed in range(n_seeds):
                same = repr((s.method, _row_dataset(g, s), s.config_file, _jsonable(s.params), seed))
                if same not in runs:
                    runs[same] = run_method(s.method, dataset=_row_dataset(g, s), out=work / s.key / f"seed{seed}",
                                            seed=seed, config_file=_config_path(s.config_file), params=s.params,
                                            data_dir=data_dir, device=device, overwrite=True, progress=False)
                res = runs[same]
                if s.metric not in res.utility:
                    raise DataError(f"Setting {s.key!r}: the {s.method} run reports no utility {s.metric!r} "
                                    f"(it has {sorted(res.utility)}).")
                values.append(float(res.utility[s.metric]))
                acc.append(float(res.accounting.epsilon))
                claimed.append(float(res.claimed_epsilon))
                if seed == 0 and s.attack and attacks:
                    emp = _empirical(Path(res.release), float(res.accounting.delta), seed)
                stage.advance()
            if s.no_privacy:
                acc, claimed = [math.inf], [math.inf]
            rows[s.key] = RowResult(s, tuple(values), max(acc), max(claimed), emp[0], emp[1], time.perf_counter() - t1,
                                    emp[2])
            rep.log(f"[{i + 1}/{len(g.settings)}] {s.label}: {s.metric} = {rows[s.key].mean:.3f} ± "
                    f"{rows[s.key].std:.3f}, accounted ε = {_fmt(rows[s.key].accounted_epsilon)} "
                    f"({time.perf_counter() - t1:.0f} s)")
    verdicts = tuple(_verdict(c, rows, g.scale) for c in g.claims)
    root = None if out is None or Path(out) == DEFAULT_OUT else Path(out).as_posix()
    table = ReproductionTable(g, tuple(range(n_seeds)), tuple(rows.values()), verdicts, time.perf_counter() - t0, root)
    write_text(md_path, table.to_markdown())
    write_json(json_path, table.to_dict())
    rep.log(f"tables written to {md_path} and .json")
    return table


def grid_settings(grid: Grid, keys: Sequence[str]) -> Grid:
    """``grid`` restricted to the settings ``keys`` and the claims that only need them (a smaller run)."""
    keep = set(keys)
    if not keep:
        raise ParameterError(f"The 'only' parameter of dpaudit reproduce must name at least one setting of {grid.paper} "
                             f"({', '.join(s.key for s in grid.settings)}). Got an empty selection instead.")
    unknown = keep - {s.key for s in grid.settings}
    if unknown:
        raise ParameterError(f"Unknown settings {sorted(unknown)} for {grid.paper}; the settings are "
                             f"{[s.key for s in grid.settings]}.")
    return Grid(grid.paper, grid.title, grid.citation, grid.scale, grid.datasets,
                tuple(s for s in grid.settings if s.key in keep),
                tuple(c for c in grid.claims if set(c.rows) <= keep), grid.notes)
