"""Audit a training function the user wrote (``dpaudit audit-trainer``, claims with ``attack = {kind = "trainer"}``).

The user names ``FILE.py:train`` (run under :mod:`dpaudit.training.usercode`'s rules: the file's sha256 is recorded
and the bytes hashed are the bytes run). The contract::

    def train(X, y, *, seed, hook):      # X: float32 (N, features), y: int64 (N,), numpy; returns nothing needed
        ...                             # attach the hook in two lines (dpaudit.training.audit_hook)

dpaudit draws a fair coin per canary (``canaries`` of them); the canaries whose coin says "in" are appended to the
data as records ``num_real .. N-1`` (their inputs copies of random real records, their labels random: their
gradients are replaced by Dirac canary gradients anyway), so they pass through the user's own sampler, clipping and
noise. The hook records the batches and the privatised gradient at the canary and probe coordinates, and
:mod:`dpaudit.attacks.trainer_audit` gives three findings: the sampler and step count as they ran, the recorded
mechanism's lower bound (analytic: under stated assumptions) and a certified one-run bound (no assumption). A claim
is REFUTED when either bound exceeds it, with what differs from the declared recipe named.

When neither refutes the claim, a second phase runs (:func:`input_canary_phase`): ``input_runs`` further independent
runs of the user's function (20 at ``ci``, 40 at ``thorough``) on the real records plus *input canaries* (one per
non-constant feature, extreme in that feature, each in the data by a fair coin; no gradient canary), with the hook
summing the privatised update of the first-layer weight (the first parameter with a dimension equal to the input
width, see :mod:`dpaudit.training.audit_hook`). Their certified bound, pooled over the runs
(:func:`dpaudit.attacks.trainer_audit.certified_input_canaries`: certified, no assumption beyond the coins and the
runs' independence), catches leaks that do not pass through one record's clipped gradient, such as a normalisation
with the training set's own statistics. No parameter with a dimension equal to the input width: the phase stops
after its first run with a note (never an error, never a refutation). The runs are :class:`dpaudit.executors.Unit`
s (seeds from :func:`dpaudit.executors.derive_seed`), so any executor runs them side by side with the same result.

The failure probability ``1 - confidence`` is split over the four confidence limits the verdict rests on
(:data:`CONFIDENCE_SPLIT`: the noise multiplier's upper limit 1/2, the certified gradient-canary bound 3/10, the
Poisson rate's lower limit 1/10, the input canaries' certified bound 1/10), so that the verdict is wrong with
probability at most ``1 - confidence`` (a union bound).

Threat models: ``white-box`` (every privatised update is seen: the standard DP-SGD threat model; all of the above)
and ``final-model`` (:func:`final_model_phase`): only the model the training function returns is seen. There the
user's function runs ``final_runs`` times (60 at ``ci``, 150 at ``thorough``), independently (executor units, seeds
from :func:`dpaudit.executors.derive_seed`), each time on the real records plus input canaries (one per non-constant
feature, :data:`~dpaudit.attacks.trainer_audit.FINAL_MODEL_EXTREME` real standard deviations above the real mean
in that feature, a random label, in the data by a fair coin; the hook is :data:`~dpaudit.training.audit_hook.NO_HOOK`:
nothing is recorded or replaced), and each canary is scored by the log likelihood the returned model gives its label
(:func:`dpaudit.attacks.trainer_audit.certified_final_model`). The bound is certified by the one-run theorem pooled
over the runs (no assumption beyond the coins and the runs' independence), at the whole ``confidence``. The
recorded-run accounting (sampler, steps, noise) needs the hook's record: it is white-box only, and the final-model
output says so. The training function must return the trained model (a callable mapping a float32 (m, d) tensor to
(m, classes) logits, e.g. a ``torch.nn.Module``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dpaudit._format import fmt_number
from dpaudit.attacks.canary import CanaryBound
from dpaudit.attacks.trainer_audit import (
    ANALYTIC_ASSUMPTIONS,
    INPUT_CANARY_EXTREME,
    INPUT_CANARY_RULE,
    FINAL_MODEL_EXTREME,
    FINAL_MODEL_RULE,
    FINAL_MODEL_SCORE,
    certified_final_model,
    certified_input_canaries,
    input_canary_design,
    DIFFERENCE_THRESHOLD,
    NoiseFinding,
    RecordedBound,
    SamplerFinding,
    certified_runs,
    estimate_noise_runs,
    identify_sampler,
    recorded_lower_bound,
)
from dpaudit.errors import DataError, ParameterError, check_choice, check_float, check_int, check_probability
from dpaudit.progress import Reporter, as_reporter
from dpaudit.serial import JsonValue

__all__ = ["BUDGETS", "THREAT_MODELS", "TrainerAuditResult", "InputCanaryFinding", "FinalModelFinding",
           "audit_trainer", "input_canary_phase", "final_model_phase", "recipe_differences", "RECIPE_KEYS"]

#: Canaries and probe coordinates per run, and runs, per budget. ``ci``: one run in seconds; ``thorough``: two
#: independent runs (the noise multiplier's limit pools their steps; the certified bound takes both runs' canaries)
#: of 2,000 canaries each: the noise limit's precision grows with the canary observations in a batch (one per
#: included canary and epoch), and 300 probes estimate the noise per step to 4% (their quietest coordinates keep real
#: gradients out of it). The model needs at least canaries + probes trainable coordinates. ``input_runs``: the
#: independent runs of the input-canary phase (about 59 canaries each on digits; it runs only when the gradient
#: canaries do not refute the claim): on the normalisation bug's pilot seeds 20 runs certified 3.66 (every guess
#: right), 10 runs 3.02, 5 runs 2.33.
#: ``final_runs``: the independent runs of the final-model audit (about 59 canaries each on digits): on the bug
#: suite's pilot seeds 60 runs certified 4.0 (normalisation) and 3.3-4.0 (batch-mean clipping), 40 runs about 2.
BUDGETS: dict[str, dict[str, int]] = {"ci": {"canaries": 500, "probes": 500, "runs": 1, "input_runs": 20,
                                             "final_runs": 60},
                                      "thorough": {"canaries": 2000, "probes": 300, "runs": 2, "input_runs": 40,
                                                   "final_runs": 150}}
THREAT_MODELS = ("white-box", "final-model")
#: What the final-model output says in place of the recorded-run accounting (white-box only).
FINAL_MODEL_NO_RECORD = ("the recorded-run accounting (sampler, step count and noise identified from the hook's "
                         "record, compared with the recipe) is not available in the final-model threat model: only "
                         "the returned model is observed; run --threat-model white-box for it")
#: How the verdict's failure probability ``1 - confidence`` is split over its confidence limits (a union bound): the
#: noise multiplier's upper limit, the certified one-run bound, the Poisson rate's lower limit (the rate is estimated
#: from every record's batches, so a small share costs little), the input canaries' certified bound (it refutes by
#: a wide margin when it refutes at all, so a small share costs little).
CONFIDENCE_SPLIT: dict[str, float] = {"noise": 0.5, "certified": 0.3, "rate": 0.1, "input": 0.1}
#: The hook's probe coordinates in an input-canary run (the fewest it takes; nothing reads them).
INPUT_PROBES = 2
#: Keys of a declared DP-SGD recipe (a claim's ``params`` for ``mechanism = "dpsgd"``) compared with the record.
RECIPE_KEYS = ("dataset_size", "batch_size", "noise_multiplier", "epochs", "steps", "sampling")
TRAINER_SCHEMA_VERSION = 1
MAX_RECORDS = 100_000


@dataclass(frozen=True)
class InputCanaryFinding:
    """The input-canary phase (module docstring): ``runs`` independent runs, ``features`` input canaries each (one
    per non-constant feature, ``extreme`` real standard deviations above the real mean), ``canaries`` in all;
    ``parameter``: the first-layer weight whose slices were scored, in words (empty: none found); ``certified``:
    the certified bound pooled over the runs (None: the phase stopped, ``skipped`` says why); ``rule``: the
    guessing rule fixed before the runs; ``seconds``: the phase's wall time."""

    runs: int
    features: int
    canaries: int
    extreme: float
    parameter: str
    certified: CanaryBound | None
    rule: str
    seconds: float
    skipped: str = ""

    def line(self) -> str:
        if self.certified is None:
            return f"input canaries: not scored ({self.skipped})"
        c = self.certified
        return (f"input canaries over {self.runs} runs: epsilon >= {fmt_number(c.epsilon)} at delta "
                f"{fmt_number(c.delta)} (certified, confidence {fmt_number(c.confidence)}, {c.trials} canaries: "
                f"{self.features} per run, each extreme in one feature; {self.parameter}; no assumption beyond the "
                f"runs' independence; {fmt_number(self.seconds)} s)")


@dataclass(frozen=True)
class FinalModelFinding:
    """The final-model audit (module docstring): ``runs`` independent runs of the user's function, ``features``
    input canaries each (one per non-constant feature, ``extreme`` real standard deviations above the real mean,
    random labels), ``canaries`` in all; ``certified``: their certified bound pooled over the runs (one-run theorem;
    no assumption beyond the runs' independence); ``score`` and ``rule``: fixed before the runs; ``seconds``: the
    phase's wall time."""

    runs: int
    features: int
    canaries: int
    extreme: float
    certified: CanaryBound
    score: str
    rule: str
    seconds: float

    def line(self) -> str:
        c = self.certified
        return (f"final-model canaries over {self.runs} runs: epsilon >= {fmt_number(c.epsilon)} at delta "
                f"{fmt_number(c.delta)} (certified: one-run theorem pooled over the runs, no assumption beyond the "
                f"runs' independence; confidence {fmt_number(c.confidence)}, {c.trials} canaries: {self.features} per "
                f"run, each extreme in one input feature, random label; score {self.score} of the returned model; "
                f"{fmt_number(self.seconds)} s)")


@dataclass(frozen=True)
class TrainerAuditResult:
    """The white-box audit of a user's training function (``trainer_audit.json``).

    ``train_fn`` / ``sha256``: the code that ran; ``claimed_epsilon`` / ``claimed_delta``; ``recipe``: the declared
    DP-SGD recipe it was compared with (empty: none); ``sampler``, ``noise``: what the loop ran; ``recorded``: the
    lower bound on the recorded mechanism's epsilon (``kind = "analytic"``: holds under its ``assumptions``; None
    for an unknown sampler); ``certified``: the certified one-run bound (no assumption); ``recipe_epsilon``: the
    declared recipe's accounted epsilon (None without a recipe); ``differences``: what the record shows against
    the recipe; ``refuted_by``: each bound above the claim, in words (non-empty: the claim is REFUTED);
    ``confidence``: of the verdict (split over its limits by :data:`CONFIDENCE_SPLIT`); ``canaries`` and ``probes``
    per run, ``runs`` independent runs (the sampler shown is the first run's); ``input_canaries``: the input-canary
    phase (None: it did not run, the notes say why).

    ``threat_model = "final-model"``: ``sampler``, ``noise`` and ``recorded`` are None (the recorded-run accounting
    is white-box only; the notes say so), ``certified`` is the final-model canaries' bound, ``final_model`` holds
    the runs (``probes`` 0, ``canaries`` per run, ``runs`` the final-model runs)."""

    train_fn: str
    sha256: str
    claimed_epsilon: float
    claimed_delta: float
    threat_model: str
    budget: str
    seed: int
    confidence: float
    num_real: int
    canaries: int
    probes: int
    sampler: SamplerFinding | None
    noise: NoiseFinding | None
    recorded: RecordedBound | None
    certified: CanaryBound
    recipe: Mapping[str, JsonValue] = field(default_factory=dict)
    recipe_epsilon: float | None = None
    differences: tuple[str, ...] = ()
    refuted_by: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    runs: int = 1
    input_canaries: InputCanaryFinding | None = None
    final_model: FinalModelFinding | None = None
    schema_version: int = TRAINER_SCHEMA_VERSION

    __json_computed__ = ("verdict",)

    @property
    def verdict(self) -> str:
        """``REFUTED`` when a bound is above the claim, else ``NOT REFUTED`` (an audit cannot show a claim holds)."""
        return "REFUTED" if self.refuted_by else "NOT REFUTED"

    @property
    def strongest_certified(self) -> CanaryBound:
        """The larger certified bound: the gradient canaries' or the input canaries' (when they ran). Picking the
        larger of two bounds after seeing both holds at the union of their failure probabilities, so with both the
        confidence is ``1 - (1 - c_gradient) - (1 - c_input)`` (the verdict's split gives them 0.3 + 0.1 of
        ``1 - confidence``), not the chosen bound's own."""
        ic = self.input_canaries
        if ic is None or ic.certified is None:
            return self.certified
        best = ic.certified if ic.certified.epsilon > self.certified.epsilon else self.certified
        joint = 1.0 - (1.0 - float(self.certified.confidence)) - (1.0 - float(ic.certified.confidence))
        return replace(best, confidence=joint)

    @property
    def exit_code(self) -> int:
        return 1 if self.refuted_by else 0

    def lines(self) -> list[str]:
        """The findings in words (console, docs)."""
        s, nz = self.sampler, self.noise
        if s is None or nz is None or self.final_model is not None:
            return self._final_lines()
        out = [f"trainer {self.train_fn} (sha256 {self.sha256[:12]}...), seed {self.seed}, {self.canaries} canaries "
               f"per run, {self.runs} run{'s' if self.runs > 1 else ''}, {self.num_real} real records",
               f"sampler: {s.kind} ({s.evidence}); {s.steps} steps over N = {s.num_records} records",
               f"noise: std {fmt_number(nz.noise_std)} per coordinate, canary signal {fmt_number(nz.signal)}: noise "
               f"multiplier {fmt_number(nz.sigma_eff)} (at most {fmt_number(nz.sigma_eff_upper)} at confidence "
               f"{fmt_number(nz.confidence)})"]
        if self.recorded is not None:
            r = self.recorded
            out.append(f"recorded mechanism: epsilon >= {fmt_number(r.epsilon)} at delta {fmt_number(r.delta)} "
                       f"(analytic lower bound, confidence {fmt_number(r.confidence)}; point estimate "
                       f"{fmt_number(r.estimate)}; assumes {r.assumptions})")
        c = self.certified
        out.append(f"certified one-run: epsilon >= {fmt_number(c.epsilon)} at delta {fmt_number(c.delta)} (certified, "
                   f"confidence {fmt_number(c.confidence)}, {c.trials} canaries, score {c.score})")
        if self.input_canaries is not None:
            out.append(self.input_canaries.line())
        if self.recipe_epsilon is not None:
            out.append(f"declared recipe: accounted epsilon {fmt_number(self.recipe_epsilon)}")
        out += [f"differs from the recipe: {d}" for d in self.differences]
        out.append(f"claim epsilon = {fmt_number(self.claimed_epsilon)}, delta = {fmt_number(self.claimed_delta)}: "
                   f"{self.verdict}" + (": " + "; ".join(self.refuted_by) if self.refuted_by else
                                        " (no bound above the claim)"))
        return out

    def _final_lines(self) -> list[str]:
        out = [f"trainer {self.train_fn} (sha256 {self.sha256[:12]}...), seed {self.seed}, threat model final-model "
               f"(only the returned model is observed), {self.runs} runs, {self.canaries} canaries per run, "
               f"{self.num_real} real records"]
        if self.final_model is not None:
            out.append(self.final_model.line())
        out.append(f"recorded-run accounting: not available ({FINAL_MODEL_NO_RECORD.split(': ', 1)[1]})")
        if self.recipe_epsilon is not None:
            out.append(f"declared recipe: accounted epsilon {fmt_number(self.recipe_epsilon)}")
        out.append(f"claim epsilon = {fmt_number(self.claimed_epsilon)}, delta = {fmt_number(self.claimed_delta)}: "
                   f"{self.verdict}" + (": " + "; ".join(self.refuted_by) if self.refuted_by else
                                        " (no bound above the claim)"))
        return out


def _recipe(recipe: Mapping[str, Any] | None) -> dict[str, Any]:
    if not recipe:
        return {}
    if not isinstance(recipe, Mapping):
        raise ParameterError(f"The 'recipe' parameter of audit_trainer must be a table of {', '.join(RECIPE_KEYS)}. "
                             f"Got {type(recipe).__name__} instead.")
    extra = sorted(set(recipe) - set(RECIPE_KEYS))
    if extra:
        raise ParameterError(f"Unknown key {extra[0]!r} in the recipe of audit_trainer; allowed keys: "
                             f"{', '.join(RECIPE_KEYS)}.")
    for key in ("dataset_size", "batch_size", "noise_multiplier"):
        if key not in recipe:
            raise ParameterError(f"The 'recipe' parameter of audit_trainer needs {key!r}. Got keys "
                                 f"{', '.join(sorted(recipe)) or 'none'} instead.")
    if ("epochs" in recipe) == ("steps" in recipe):
        raise ParameterError("The 'recipe' parameter of audit_trainer needs exactly one of 'epochs' and 'steps'. Got "
                             f"{'both' if 'epochs' in recipe else 'neither'} instead.")
    return dict(recipe)


def recipe_differences(recipe: Mapping[str, Any], sampler: SamplerFinding, noise: NoiseFinding) -> list[str]:
    """What the recorded run shows against the declared recipe, in words (only differences that can raise the
    epsilon: more steps, less noise, a higher rate, another sampler)."""
    from dpaudit.accountants.dpsgd import dpsgd_steps

    if not recipe:
        return []
    out = []
    n, b = int(recipe["dataset_size"]), int(recipe["batch_size"])
    steps, q = dpsgd_steps(dataset_size=n, batch_size=b, epochs=recipe.get("epochs"), steps=recipe.get("steps"))
    # the trainer got N = n + the included canaries: a recipe in epochs counts ceil(epochs N / B) steps there
    at_n = steps if recipe.get("epochs") is None else max(steps, math.ceil(float(recipe["epochs"]) * sampler.num_records / b - 1e-9))
    if sampler.steps > at_n:
        out.append(f"{sampler.steps} steps where the claim counts {steps}"
                   + ("" if at_n == steps else f" ({at_n} at the {sampler.num_records} records the trainer got, canaries included)"))
    sigma = float(recipe["noise_multiplier"])
    if noise.sigma_eff_upper < sigma:
        out.append(f"noise multiplier at most {fmt_number(noise.sigma_eff_upper)} (noise std {fmt_number(noise.noise_std)} "
                   f"over a canary signal of {fmt_number(noise.signal)}) where the recipe says {fmt_number(sigma)}")
    declared = str(recipe.get("sampling", "poisson"))
    kind = {"fixed": "fixed-wor"}.get(sampler.kind, sampler.kind)
    if kind not in (declared, "full-batch"):
        out.append(f"batches sampled as {sampler.kind} ({sampler.evidence}) where the recipe accounts {declared}")
    if sampler.kind == "poisson" and sampler.rate_low > q * (1 + 1e-9):
        out.append(f"sampling rate at least {fmt_number(sampler.rate_low)} where the recipe says {fmt_number(q)}")
    return out


def _digits(records: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from dpaudit.training.data import load_dataset

    ds = load_dataset("digits", seed=seed, num_samples=records)
    return ds.X.reshape(len(ds.X), -1).astype(np.float32), ds.y.astype(np.int64)


def _input_canary_run(pinned: Any, X: np.ndarray, y: np.ndarray, rows: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """One input-canary run (an executor :class:`~dpaudit.executors.Unit`; module-level so a worker can import it):
    labels and fair coins from ``seed``, the included canaries ``rows`` appended to the real records (in feature
    order), the user's function run with a hook that sums the first-layer update. Returns numpy arrays only."""
    import torch

    from dpaudit.training.audit_hook import AuditHook
    from dpaudit.training.usercode import run_pinned

    fn = run_pinned(pinned, "train_fn")
    rng = np.random.default_rng([int(seed), 0x1C])
    labels = rng.integers(0, int(y.max()) + 1 if y.size else 2, size=len(rows)).astype(np.int64)
    inc = rng.random(len(rows)) < 0.5
    X_all = np.concatenate([X, rows[inc]]).astype(np.float32, copy=False)
    y_all = np.concatenate([y, labels[inc]]).astype(np.int64, copy=False)
    hook = AuditHook(num_real=len(X_all), canary_index=np.zeros(0, dtype=np.int64), probes=INPUT_PROBES, seed=seed,
                     watch_width=int(X.shape[1]))
    torch.manual_seed(int(seed))
    fn(X_all, y_all, seed=int(seed), hook=hook)
    rec = hook.record()
    pos = rec.watch_parameter[0] if rec.watch_parameter else -1
    return {"included": inc, "watch": rec.watch if rec.watch is not None else np.zeros((0, 0)),
            "watch_parameter": np.asarray(rec.watch_parameter, dtype=np.int64),
            "shape": np.asarray(rec.parameter_shapes[pos] if pos >= 0 else (), dtype=np.int64)}


def input_canary_phase(pinned: Any, X: np.ndarray, y: np.ndarray, *, runs: int, seed: int, delta: float,
                       confidence: float, executor: Any = None, progress: "bool | Reporter" = False,
                       extreme: float = INPUT_CANARY_EXTREME) -> InputCanaryFinding:
    """The input-canary phase (module docstring): ``runs`` independent runs of the pinned training function, each
    an executor unit keyed ``input-canaries.R`` with the seed ``derive_seed(seed, key)``, their certified bound
    pooled (:func:`~dpaudit.attacks.trainer_audit.certified_input_canaries`). The first run alone says whether the
    model has a first-layer weight (a parameter with a dimension equal to the input width); without one the phase
    stops there. A run that raises (some loops cannot take records this extreme: Flower's clipping divides by a
    client update's norm, which an input saturating the softmax makes exactly 0) stops the phase with the error in
    ``skipped``: no bound, never an error."""
    from dpaudit.executors import LocalExecutor, Unit, derive_seed

    t0 = time.perf_counter()
    runs = check_int(runs, "input_runs", "audit_trainer", low=1, high=10_000)
    ex = executor if executor is not None else LocalExecutor()
    rule = INPUT_CANARY_RULE.describe()
    features, rows = input_canary_design(X, extreme=extreme)
    if features.size < 2:
        return InputCanaryFinding(0, int(features.size), 0, float(extreme), "", None, rule,
                                  time.perf_counter() - t0, skipped=f"the real inputs have {features.size} non-constant "
                                                                   "feature(s), fewer than 2")
    units = [Unit(key=f"input-canaries.{r}", fn=_input_canary_run,
                  args=(pinned, X, y, rows, derive_seed(seed, f"input-canaries.{r}"))) for r in range(runs)]

    def failed(done: int, exc: Exception) -> InputCanaryFinding:
        return InputCanaryFinding(done, int(features.size), 0, float(extreme), "", None, rule,
                                  time.perf_counter() - t0,
                                  skipped=f"the training function failed on a run with input canaries "
                                          f"({type(exc).__name__}: {str(exc)[:200]}); these canaries are extreme "
                                          "records, and a loop that cannot take them is not scored")

    try:
        first = ex.map(units[:1], label="input-canary run 1", progress=progress)
    except Exception as exc:           # the user's code on extreme records: no evidence, never an error
        return failed(1, exc)
    if first[0]["watch"].size == 0:
        return InputCanaryFinding(1, int(features.size), 0, float(extreme), "", None, rule, time.perf_counter() - t0,
                                  skipped=f"no trainable parameter has a dimension equal to the input width "
                                          f"{X.shape[1]}: no first-layer weight to observe")
    try:
        results = first + ex.map(units[1:], label="input-canary runs", progress=progress)
    except Exception as exc:
        return failed(runs, exc)
    pos, axis = (int(v) for v in first[0]["watch_parameter"])
    shape = tuple(int(v) for v in first[0]["shape"])
    where = f"first-layer weight: parameter {pos} of shape {shape}, feature j's slice along axis {axis}"
    bound = certified_input_canaries([(r["watch"], features, r["included"]) for r in results], delta=delta,
                                     confidence=confidence)
    return InputCanaryFinding(runs, int(features.size), int(features.size) * runs, float(extreme), where, bound, rule,
                              time.perf_counter() - t0)


def _final_model_run(pinned: Any, X: np.ndarray, y: np.ndarray, rows: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """One final-model run (an executor :class:`~dpaudit.executors.Unit`; module-level so a worker can import it):
    labels and fair coins from ``seed``, the included canaries ``rows`` appended to the real records (in feature
    order), the user's function run with :data:`~dpaudit.training.audit_hook.NO_HOOK` (nothing recorded, nothing
    replaced), the returned model evaluated on every canary input. Returns numpy arrays only."""
    import torch

    from dpaudit.training.audit_hook import NO_HOOK
    from dpaudit.training.usercode import run_pinned

    fn = run_pinned(pinned, "train_fn")
    rng = np.random.default_rng([int(seed), 0xF1])
    classes = int(y.max()) + 1 if y.size else 2
    labels = rng.integers(0, classes, size=len(rows)).astype(np.int64)
    inc = rng.random(len(rows)) < 0.5
    X_all = np.concatenate([X, rows[inc]]).astype(np.float32, copy=False)
    y_all = np.concatenate([y, labels[inc]]).astype(np.int64, copy=False)
    torch.manual_seed(int(seed))
    model = fn(X_all, y_all, seed=int(seed), hook=NO_HOOK)
    if model is None or not callable(model):
        raise DataError("The 'train_fn' parameter of audit_trainer must name a function that returns the trained model "
                        "(a callable mapping a float32 (m, d) tensor to (m, classes) logits, e.g. the torch.nn.Module) "
                        "for --threat-model final-model. Got a function that returned "
                        f"{'None' if model is None else type(model).__name__} instead.")
    if hasattr(model, "eval"):
        model.eval()
    with torch.no_grad():
        out = model(torch.as_tensor(np.ascontiguousarray(rows), dtype=torch.float32))
    logits = out.detach().cpu().to(torch.float64).numpy() if hasattr(out, "detach") else np.asarray(out, dtype=np.float64)
    if logits.ndim != 2 or logits.shape[0] != len(rows) or logits.shape[1] < classes:
        raise DataError("The 'train_fn' parameter of audit_trainer must return a model whose output on (m, d) inputs is "
                        f"(m, classes >= {classes}) logits for --threat-model final-model. Got an output of shape "
                        f"{tuple(logits.shape)} for m = {len(rows)} instead.")
    return {"included": inc, "labels": labels, "logits": logits}


def final_model_phase(pinned: Any, X: np.ndarray, y: np.ndarray, *, runs: int, seed: int, delta: float,
                      confidence: float, executor: Any = None, progress: "bool | Reporter" = False,
                      extreme: float = FINAL_MODEL_EXTREME) -> FinalModelFinding:
    """The final-model audit (module docstring): ``runs`` independent runs of the pinned training function, each an
    executor unit keyed ``final-model.R`` with the seed ``derive_seed(seed, key)``, their certified bound pooled
    (:func:`~dpaudit.attacks.trainer_audit.certified_final_model`). A run that raises is an error of the audit (the
    user's function is the audited object: nothing to score without its model)."""
    from dpaudit.executors import LocalExecutor, Unit, derive_seed

    t0 = time.perf_counter()
    runs = check_int(runs, "final_runs", "audit_trainer", low=1, high=10_000)
    ex = executor if executor is not None else LocalExecutor()
    features, rows = input_canary_design(X, extreme=extreme)
    if features.size < 2:
        raise DataError(f"The real inputs have {features.size} non-constant feature(s): the final-model audit needs at "
                        "least 2 (one canary per non-constant feature).")
    units = [Unit(key=f"final-model.{r}", fn=_final_model_run,
                  args=(pinned, X, y, rows, derive_seed(seed, f"final-model.{r}"))) for r in range(runs)]
    results = ex.map(units[:1], label="final-model run 1", progress=progress)   # a bad return value: one run's cost
    results += ex.map(units[1:], label="final-model runs", progress=progress)
    bound = certified_final_model([(r["logits"], r["labels"], r["included"]) for r in results], delta=delta,
                                  confidence=confidence)
    return FinalModelFinding(runs, int(features.size), int(features.size) * runs, float(extreme), bound,
                             FINAL_MODEL_SCORE, FINAL_MODEL_RULE.describe(), time.perf_counter() - t0)


def _audit_final_model(pinned: Any, *, eps: float, dlt: float, conf: float, budget: str, seed: int, n: int,
                       runs: int, rec: dict[str, Any], recipe_eps: float | None, executor: Any, rep: Any,
                       t0: float) -> TrainerAuditResult:
    X, y = _digits(n, seed)
    with rep.stage(f"final model: {runs} runs of {pinned.path.text}, each with one canary record per non-constant "
                   "feature; only the returned model is scored", 1):
        finding = final_model_phase(pinned, X, y, runs=runs, seed=seed, delta=dlt, confidence=conf,
                                    executor=executor, progress=rep)
    c = finding.certified
    refuted = []
    if c.epsilon > eps:
        refuted.append(f"final-model canaries over {finding.runs} runs: certified one-run lower bound "
                       f"{fmt_number(c.epsilon)} > claimed {fmt_number(eps)} (certified: one-run theorem pooled over the "
                       f"runs, no assumption beyond the runs' independence; {c.trials} canaries, confidence "
                       f"{fmt_number(c.confidence)}; only the returned model observed)")
    notes = [FINAL_MODEL_NO_RECORD,
             f"the certified bound is computed at the verdict's whole confidence {fmt_number(conf)} (the only limit the "
             "final-model verdict rests on)",
             "a final model of correct or lightly broken Poisson-subsampled DP-SGD reveals little of one record: a "
             "bound below the claim is no evidence that the claim holds"]
    return TrainerAuditResult(
        train_fn=pinned.path.text, sha256=pinned.sha256, claimed_epsilon=eps, claimed_delta=dlt,
        threat_model="final-model", budget=budget, seed=seed, confidence=conf, num_real=n, canaries=finding.features,
        probes=0, sampler=None, noise=None, recorded=None, certified=c, recipe=rec, recipe_epsilon=recipe_eps,
        differences=(), refuted_by=tuple(refuted), notes=tuple(notes), seconds=time.perf_counter() - t0,
        runs=finding.runs, input_canaries=None, final_model=finding)


def audit_trainer(train_fn: str, *, epsilon: float, delta: float, recipe: Mapping[str, Any] | None = None,
                  threat_model: str = "white-box", budget: str = "ci", canaries: int | None = None,
                  probes: int | None = None, runs: int | None = None, records: int = 1000, seed: int = 0,
                  confidence: float = 0.95,
                  base: str | Path | None = None, out: str | Path | None = None, overwrite: bool = False,
                  account_recipe: bool = True, progress: "bool | Reporter" = False, input_runs: int | None = None,
                  executor: Any = None, final_runs: int | None = None) -> TrainerAuditResult:
    """White-box: run the user's ``train_fn`` (``FILE.py:NAME``) once (``runs`` = 2: twice, independently; default:
    the budget's) on ``records`` digits records plus fair-coin canaries, with the white-box audit hook, then, when
    the gradient canaries do not refute the claim, ``input_runs`` more times with input canaries; judge the claim
    (``epsilon``, ``delta``); see the module docstring. ``threat_model="final-model"``: run it ``final_runs`` times
    (default: the budget's) with input canaries and score only the returned models (:func:`final_model_phase`).
    ``recipe``: the declared DP-SGD recipe (keys :data:`RECIPE_KEYS`) to compare the record with and to account.
    ``out``: also write ``trainer_audit.json`` into that folder; ``account_recipe=False``: leave ``recipe_epsilon``
    out (a claim accounts its recipe itself). ``input_runs``: runs of the input-canary phase (default: the budget's;
    0: no such phase); ``executor``: runs them (a :class:`dpaudit.executors.Executor`; default in this process)."""
    from dpaudit.training.usercode import pin_code, run_pinned

    owner = "audit_trainer"
    t0 = time.perf_counter()
    eps = check_float(epsilon, "epsilon", owner, low=0.0)
    dlt = check_float(delta, "delta", owner, low=0.0, high=1.0, low_open=True, high_open=True)
    check_choice(threat_model, "threat_model", owner, THREAT_MODELS)
    check_choice(budget, "budget", owner, tuple(BUDGETS))
    conf = check_probability(confidence, "confidence", owner)
    seed = check_int(seed, "seed", owner, low=0, high=2**31 - 1)
    n = check_int(records, "records", owner, low=10, high=1797)
    m = check_int(BUDGETS[budget]["canaries"] if canaries is None else canaries, "canaries", owner, low=4, high=MAX_RECORDS)
    p = check_int(BUDGETS[budget]["probes"] if probes is None else probes, "probes", owner, low=16, high=100_000)
    runs = check_int(BUDGETS[budget]["runs"] if runs is None else runs, "runs", owner, low=1, high=2)
    n_input = check_int(BUDGETS[budget]["input_runs"] if input_runs is None else input_runs, "input_runs", owner, low=0,
                        high=10_000)
    n_final = check_int(BUDGETS[budget]["final_runs"] if final_runs is None else final_runs, "final_runs", owner,
                        low=1, high=10_000)
    if threat_model == "final-model" and canaries is not None:
        raise ParameterError(f"The 'canaries' parameter of {owner} applies to the white-box threat model only (the "
                             "final-model audit has one canary per non-constant input feature in each run). Got "
                             f"{canaries} with threat_model 'final-model' instead.")
    rec = _recipe(recipe)
    rep = as_reporter(progress)
    pinned = pin_code(train_fn, "train_fn", base=base)
    fn = run_pinned(pinned, "train_fn")
    if out is not None:
        from dpaudit._io import check_output_folder

        check_output_folder(out)          # a link or a file is refused before the run
    if out is not None and Path(out).exists():
        from dpaudit._io import check_replaceable
        from dpaudit.errors import OutputError

        if not overwrite:
            raise OutputError(f"The output folder {str(out)!r} already exists; pass overwrite=True (--overwrite) to "
                              "replace it.")
        check_replaceable(Path(out))

    if threat_model == "final-model":
        recipe_eps_f = None
        if rec and account_recipe:
            from dpaudit.accountants.dpsgd import account_dpsgd

            recipe_eps_f = float(account_dpsgd(dataset_size=int(rec["dataset_size"]),
                                               batch_size=int(rec["batch_size"]),
                                               noise_multiplier=float(rec["noise_multiplier"]),
                                               epochs=rec.get("epochs"), steps=rec.get("steps"),
                                               sampling=str(rec.get("sampling", "poisson")), delta=dlt,
                                               lower_bound=False).epsilon)
        result = _audit_final_model(pinned, eps=eps, dlt=dlt, conf=conf, budget=budget, seed=seed, n=n, runs=n_final,
                                    rec=rec, recipe_eps=recipe_eps_f, executor=executor, rep=rep, t0=t0)
        _write(result, out, overwrite)
        return result

    X, y = _digits(n, seed)
    import torch

    from dpaudit.training.audit_hook import AuditHook

    records_ = []
    for run in range(runs):
        # run 0 keeps the seed; a second run (thorough) gets its own coins, hook and training seed
        rng = np.random.default_rng([seed, 0xCA7A] if run == 0 else [seed, 0xCA7A, run])
        run_seed = seed if run == 0 else (seed + 1_000_003 * run) % 2**31
        inc = rng.random(m) < 0.5
        k = int(inc.sum())
        ci = np.full(m, -1, dtype=np.int64)
        ci[inc] = n + np.arange(k)
        Xc = X[rng.integers(0, n, size=k)]
        yc = rng.integers(0, 10, size=k).astype(np.int64)
        X_all, y_all = np.concatenate([X, Xc]), np.concatenate([y, yc])
        hook = AuditHook(num_real=n, canary_index=ci, probes=p, seed=run_seed)
        torch.manual_seed(run_seed)
        with rep.stage(f"running {pinned.path.text} with the audit hook (run {run + 1} of {runs}: {m} canaries, "
                       f"{k} in the data)", 1):
            fn(X_all, y_all, seed=run_seed, hook=hook)
        records_.append(hook.record())
    record = records_[0]
    alpha = 1.0 - conf
    conf_noise, conf_cert, conf_rate, conf_input = (1.0 - CONFIDENCE_SPLIT[k] * alpha
                                                     for k in ("noise", "certified", "rate", "input"))
    samplers = [identify_sampler(r.membership, r.num_records, confidence=conf_rate) for r in records_]
    sampler = samplers[0]
    noise = estimate_noise_runs([(r.canary_obs, r.probe_obs, r.membership, r.canary_index) for r in records_],
                                confidence=conf_noise)
    bounds = [recorded_lower_bound(s, noise, dlt) for s in samplers]
    recorded = None if any(b is None for b in bounds) else min(bounds, key=lambda b: b.epsilon)  # type: ignore[union-attr]
    q_claim = sigma_claim = None
    recipe_eps = None
    if rec:
        from dpaudit.accountants.dpsgd import account_dpsgd, dpsgd_steps

        _, q_claim = dpsgd_steps(dataset_size=int(rec["dataset_size"]), batch_size=int(rec["batch_size"]),
                                 epochs=rec.get("epochs"), steps=rec.get("steps"))
        sigma_claim = float(rec["noise_multiplier"])
        if account_recipe:
            recipe_eps = float(account_dpsgd(dataset_size=int(rec["dataset_size"]), batch_size=int(rec["batch_size"]),
                                             noise_multiplier=sigma_claim, epochs=rec.get("epochs"),
                                             steps=rec.get("steps"), sampling=str(rec.get("sampling", "poisson")),
                                             delta=dlt, lower_bound=False).epsilon)
    cert = certified_runs([(r.canary_obs, r.probe_obs, r.included) for r in records_], delta=dlt, confidence=conf_cert,
                          sampling_rate=q_claim, noise_multiplier=sigma_claim)
    diffs = recipe_differences(rec, sampler, noise)
    refuted = []
    notes = [f"the noise multiplier's limit is computed at confidence {fmt_number(conf_noise)}, the certified bound at "
             f"{fmt_number(conf_cert)}, the Poisson rate's lower limit at {fmt_number(conf_rate)} and the input "
             f"canaries' certified bound at {fmt_number(conf_input)}, so that the verdict's failure probability is "
             f"at most {fmt_number(1.0 - conf)}"]
    if cert.epsilon > eps:
        refuted.append(f"certified one-run lower bound {fmt_number(cert.epsilon)} > claimed {fmt_number(eps)} "
                       f"(white-box canaries through the trainer's own sampler, clipping and noise; "
                       f"{cert.trials} canaries, confidence {fmt_number(conf_cert)})")
    if recorded is not None and recorded.epsilon > eps:
        refuted.append(f"analytic: the recorded mechanism's lower bound {fmt_number(recorded.epsilon)} > claimed "
                       f"{fmt_number(eps)} ({sampler.kind}, {sampler.steps} steps, noise multiplier at most "
                       f"{fmt_number(noise.sigma_eff_upper)}; assumes {ANALYTIC_ASSUMPTIONS})"
                       + (f"; differs from the recipe: {'; '.join(diffs)}" if diffs else ""))
    if len({(sm.kind, sm.steps, sm.num_records) for sm in samplers}) > 1:
        notes.append("the runs differ in sampler, steps or records (" + "; ".join(
            f"{sm.kind}, {sm.steps} steps, N = {sm.num_records}" for sm in samplers) + "): the smaller bound is used")
    input_finding = None
    if refuted:
        notes.append("input canaries not run: the gradient canaries' evidence already refutes the claim")
    elif n_input == 0:
        notes.append("input canaries not run (input_runs = 0)")
    else:
        with rep.stage(f"input canaries: {n_input} more runs of {pinned.path.text}, each with one canary record per "
                       "non-constant feature", 1):
            input_finding = input_canary_phase(pinned, X, y, runs=n_input, seed=seed, delta=dlt,
                                               confidence=conf_input, executor=executor, progress=rep)
        ic = input_finding.certified
        if ic is None:
            notes.append(f"input canaries: not scored ({input_finding.skipped})")
        elif ic.epsilon > eps:
            refuted.append(f"input canaries over {input_finding.runs} runs: certified one-run lower bound "
                           f"{fmt_number(ic.epsilon)} > claimed {fmt_number(eps)} (certified, no assumption beyond the "
                           f"runs' independence; {ic.trials} canaries, each extreme in one input feature, confidence "
                           f"{fmt_number(ic.confidence)})")
    if recorded is None:
        notes.append(f"the sampler could not be identified ({sampler.evidence}): no analytic bound")
    if noise.difference_ratio < DIFFERENCE_THRESHOLD:
        notes.append(f"the noise is not drawn afresh each step: consecutive probe observations differ by "
                     f"{fmt_number(noise.difference_ratio)} of what independent noise gives (the certified score used "
                     "step-to-step differences; the analytic bound's independence assumption fails)")
    result = TrainerAuditResult(
        train_fn=pinned.path.text, sha256=pinned.sha256, claimed_epsilon=eps, claimed_delta=dlt,
        threat_model=threat_model, budget=budget, seed=seed, confidence=conf, num_real=n, canaries=m, probes=p,
        sampler=sampler, noise=noise, recorded=recorded, certified=cert, recipe=rec, recipe_epsilon=recipe_eps,
        differences=tuple(diffs), refuted_by=tuple(refuted), notes=tuple(notes), seconds=time.perf_counter() - t0,
        runs=runs, input_canaries=input_finding)
    _write(result, out, overwrite)
    return result


def _write(result: TrainerAuditResult, out: str | Path | None, overwrite: bool) -> None:
    if out is not None:
        from dpaudit._io import atomic_dir, write_json
        from dpaudit.serial import to_dict

        with atomic_dir(out, overwrite=overwrite, kind="trainer-audit") as tmp:
            write_json(tmp / "trainer_audit.json", to_dict(result))


# ------------------------------------------------------------------------------------------------------- claims

#: Keys of a claims file's ``attack = {kind = "trainer", ...}`` table.
TRAINER_ATTACK_KEYS = ("kind", "train_fn", "budget", "canaries", "confidence", "seed", "threat_model", "records")
#: Claim granularities the trainer audit can refute: its canary is one record (added or not), so a record-level
#: bound refutes a record-level claim and one at any level whose neighbours include a changed record.
TRAINER_GRANULARITIES = ("example", "user")


def parse_trainer_attack(a: Mapping[str, Any], owner: str, granularity: str, base: Path) -> dict[str, Any]:
    """Validate a claims file's ``attack = {kind = "trainer", train_fn = "FILE.py:train", budget = "ci", ...}``:
    the trainer's settings (``params`` of the claim's ``AttackBudget``) plus its ``confidence`` and ``seed``; a
    relative ``train_fn`` file is taken from the claims file's folder. Nothing runs here."""
    from dpaudit.training.usercode import parse_import_path

    extra = sorted(set(a) - set(TRAINER_ATTACK_KEYS))
    if extra:
        raise ParameterError(f"Unknown key {extra[0]!r} in {owner} (kind = \"trainer\"); allowed keys: "
                             f"{', '.join(TRAINER_ATTACK_KEYS)}.")
    if "train_fn" not in a:
        raise ParameterError(f"The 'train_fn' parameter of {owner} is required for kind = \"trainer\" (e.g. "
                             "\"train.py:train\"). Got nothing instead.")
    if granularity not in TRAINER_GRANULARITIES:
        raise ParameterError(f"The 'granularity' parameter of the claim must be one of "
                             f"{', '.join(repr(g) for g in TRAINER_GRANULARITIES)} for a trainer audit (its canary is "
                             f"one record). Got {granularity!r} instead.")
    try:
        ip = parse_import_path(a["train_fn"], "train_fn")
    except ParameterError as exc:
        raise ParameterError(f"{owner.capitalize()}: {exc}") from None
    fn = a["train_fn"]
    if ip.is_file and not Path(ip.target).is_absolute():
        fn = f"{base / ip.target}:{ip.name}"
    params: dict[str, Any] = {
        "train_fn": fn,
        "budget": check_choice(a.get("budget", "ci"), "budget", owner, tuple(BUDGETS)),
        "threat_model": check_choice(a.get("threat_model", "white-box"), "threat_model", owner, THREAT_MODELS),
        "records": check_int(a.get("records", 1000), "records", owner, low=10, high=1797),
    }
    if "canaries" in a:
        if params["threat_model"] == "final-model":
            raise ParameterError(f"The 'canaries' parameter of {owner} applies to threat_model = \"white-box\" only "
                                 "(the final-model audit has one canary per non-constant input feature in each run). "
                                 f"Got {a['canaries']!r} with threat_model = \"final-model\" instead.")
        params["canaries"] = check_int(a["canaries"], "canaries", owner, low=4, high=MAX_RECORDS)
    return {"params": params, "confidence": check_probability(a.get("confidence", 0.95), "confidence", owner),
            "seed": check_int(a.get("seed", 0), "seed", owner, low=0, high=2**31 - 1)}


def claim_evidence(budget: Any, epsilon: float, delta: float, subject: Any, *,
                   progress: "bool | Reporter" = False) -> TrainerAuditResult:
    """Run a claim's trainer audit (``budget``: its ``AttackBudget``, kind "trainer"). A ``mechanism = "dpsgd"``
    subject's params are the declared recipe the record is compared with."""
    recipe = None
    params = getattr(subject, "params", None)
    if getattr(subject, "kind", None) == "dpsgd" and isinstance(params, Mapping):
        recipe = {k: v for k, v in params.items() if k in RECIPE_KEYS}
    p = dict(budget.params)
    return audit_trainer(p["train_fn"], epsilon=epsilon, delta=delta, recipe=recipe, threat_model=p["threat_model"],
                         budget=p["budget"], canaries=p.get("canaries"), records=p["records"], seed=budget.seed,
                         confidence=budget.confidence, account_recipe=False, progress=progress)


def evidence_details(res: TrainerAuditResult) -> dict[str, Any]:
    """What a claim's empirical figure records of a trainer audit (JSON-ready)."""
    ic = res.input_canaries
    best = res.strongest_certified
    if res.sampler is None or res.noise is None:       # final-model: no recorded run
        return {"trials": int(best.trials), "sha256": res.sha256, "score": best.score, "threat_model": res.threat_model,
                "analytic_epsilon": None, "sampler": None, "steps": None, "runs": res.runs,
                "noise_multiplier_upper": None, "differences": [], "notes": list(res.notes), "seed": res.seed,
                "final_model_epsilon": float(res.certified.epsilon)}
    return {"trials": int(best.trials), "sha256": res.sha256, "score": best.score,
            "threat_model": res.threat_model,
            "analytic_epsilon": None if res.recorded is None else float(res.recorded.epsilon),
            "sampler": res.sampler.kind, "steps": res.sampler.steps, "runs": res.runs,
            "noise_multiplier_upper": float(res.noise.sigma_eff_upper) if math.isfinite(res.noise.sigma_eff_upper)
            else "inf", "differences": list(res.differences), "notes": list(res.notes), "seed": res.seed,
            "gradient_canary_epsilon": float(res.certified.epsilon),
            "input_canary_epsilon": None if ic is None or ic.certified is None else float(ic.certified.epsilon),
            "input_canary_runs": 0 if ic is None else int(ic.runs)}
