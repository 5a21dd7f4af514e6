"""The white-box audit hook: how dpaudit sees inside a training loop the user wrote (``dpaudit audit-trainer``).

A user's training function takes the hook and attaches it in two lines; when it is not audited the hook is
:data:`NO_HOOK`, whose methods return their argument unchanged (no copy, no recording)::

    def train(X, y, *, seed, hook=NO_HOOK):
        ...
        optimizer = hook.optimizer(torch.optim.SGD(model.parameters(), lr=0.5))    # line 1
        for idx in batches:                                  # idx: the dataset indices of the batch
            grads = vmap(grad(loss_fn), ...)(params, X[idx], y[idx])               # per-example gradients
            grads = hook.per_example(grads, idx)                                     # line 2
            ...  # the user's own clipping, sum, noise, division, p.grad = ...
            optimizer.step()

Opacus (a ``PrivacyEngine`` loop): ``optimizer = hook.optimizer(optimizer)`` on the ``DPOptimizer`` and
``loader = hook.data_loader(loader)`` on the ``DPDataLoader`` (its batch sampler's index lists are recorded first
in, first out; the per-example gradients are Opacus's ``p.grad_sample``).

What the hook does (:class:`AuditHook`):

- ``per_example(grads, idx)`` records the batch's dataset indices (membership: the sampler as it ran) and replaces
  the per-example gradient rows of the *canary records* in the batch by Dirac canary gradients: zero everywhere but
  one coordinate per canary, of value ``canary_scale`` (many times the largest real per-example gradient norm of
  the first batch, so that any per-example clipping the user does clips it to exactly its clipping norm). This
  happens **before** the user's clipping, summation and noise, so the canary goes through the user's own code.
- ``optimizer(opt)`` records, at every ``step()``, the privatised gradient ``p.grad`` the optimizer consumes, on
  the canary coordinates and on ``probes`` further coordinates that no canary touches (for the noise) -- a few
  hundred floats per step, never the whole model. It is recorded just before the step runs, so the noise must be in
  ``p.grad`` by then: a loop whose own optimizer adds the noise inside ``step()`` wraps the optimizer that runs
  after the noise (as :meth:`AuditHook.optimizer` does for Opacus). A step whose recorded gradient did not move at
  all is no evidence either way.

The coordinates are chosen at the first call, where real per-example gradients are smallest (Nasr et al. 2023), so
that the real records hardly move them; the ``probes`` quietest of them are the probes (a real gradient on a probe
inflates the noise estimate), the others go to the canaries in random order. Soundness of that choice: it uses
``select_rows`` real rows drawn by the hook's own generator uniformly among the *real* rows of the first batch.
Under any exchangeable sampler (Poisson, shuffling, fixed-size without replacement) and under a fixed order with the canaries after the real records, those
rows are a uniform draw from the real records whatever the number of canaries in the data set, so the choice is
independent of the canaries' coins (only the event "the first batch holds fewer real rows than ``select_rows``", then
handled by taking them all, could depend on the coins; its probability is negligible at the batch sizes of DP-SGD).

Input-canary runs (``watch_width``): the hook also sums, over all steps, the privatised gradient of one parameter,
the *first-layer weight*: the first parameter (in the optimizer's order) with a dimension equal to the input width
``d``, sliced along the last such dimension (``torch.nn.Linear(d, h).weight`` is ``(h, d)``: its column ``j`` is
feature ``j``'s weights). :attr:`HookRecord.watch` (d, k) holds, per input feature, the sum of the recorded updates
of that slice; no parameter with a dimension ``d``: ``watch`` is None. Such runs may have no gradient canary at all
(``canary_index`` empty): the canaries are input records (:mod:`dpaudit.auditing.trainer_audit`).

Gradients are matched to the optimizer's parameters by position: ``per_example``'s gradients (a dict in
``model.named_parameters()`` order, or a sequence) must list the trainable parameters in the order the optimizer
holds them (``torch.optim.SGD(model.parameters())`` does); the first ``step()`` checks the shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from dpaudit.errors import DataError, ParameterError, check_int

__all__ = ["NO_HOOK", "NoHook", "AuditHook", "HookRecord", "MAX_RECORDED_STEPS"]

#: The most optimizer steps a hook records (a longer run is refused with an error, never truncated silently).
MAX_RECORDED_STEPS = 1_000_000


class NoHook:
    """The hook of a training run that is not audited: every method returns its argument unchanged."""

    active = False

    def per_example(self, grads: Any, idx: Any) -> Any:
        return grads

    def optimizer(self, optimizer: Any) -> Any:
        return optimizer

    def data_loader(self, loader: Any) -> Any:
        return loader

    def __repr__(self) -> str:
        return "NO_HOOK"


#: The hook to default to in a training function's signature (``hook=NO_HOOK``).
NO_HOOK = NoHook()


@dataclass(frozen=True)
class HookRecord:
    """What an :class:`AuditHook` saw in one training run (numpy only; analysed by
    :mod:`dpaudit.attacks.trainer_audit`).

    ``canary_obs`` (T, m): the privatised gradient at each canary's coordinate after each of the T steps;
    ``probe_obs`` (T, P): the same at the probe coordinates; ``membership``: the dataset indices of each step's batch
    (T arrays); ``num_records``: the data set's size N as the training function got it (real records plus the
    included canaries); ``num_real``: the real records (indices 0..num_real-1); ``canary_index`` (m,): the dataset
    index of each canary, -1 where its coin left it out; ``canary_scale``: the value of each canary gradient's one
    nonzero coordinate; ``coordinates``: (parameter position, flat index) of each canary then each probe;
    ``watch`` (d, k): with ``watch_width = d``, the sum over the steps of the recorded gradient of the first-layer
    weight, one row per input feature (None: no parameter has a dimension d, or no width was asked for);
    ``watch_parameter``: (parameter position, axis) of that weight, () when none."""

    canary_obs: np.ndarray
    probe_obs: np.ndarray
    membership: tuple[np.ndarray, ...]
    num_records: int
    num_real: int
    canary_index: np.ndarray
    canary_scale: float
    coordinates: tuple[tuple[int, int], ...]
    parameter_shapes: tuple[tuple[int, ...], ...]
    watch: np.ndarray | None = None
    watch_parameter: tuple[int, ...] = ()

    @property
    def steps(self) -> int:
        return int(self.canary_obs.shape[0])

    @property
    def included(self) -> np.ndarray:
        return self.canary_index >= 0


def _as_list(grads: Any) -> list[Any]:
    if isinstance(grads, Mapping):
        return list(grads.values())
    if isinstance(grads, (list, tuple)):
        return list(grads)
    raise ParameterError("The 'grads' parameter of hook.per_example must be a dict of per-example gradient tensors "
                         f"(name -> (B, ...)) or a list / tuple of them. Got {type(grads).__name__} instead.")


def _indices(idx: Any) -> np.ndarray:
    if hasattr(idx, "detach"):
        idx = idx.detach().cpu().numpy()
    a = np.asarray(idx)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ParameterError("The 'idx' parameter of hook.per_example must be the 1-D integer dataset indices of the "
                             f"batch. Got an array of shape {a.shape} and dtype {a.dtype} instead.")
    return a.astype(np.int64, copy=False)


class AuditHook:
    """The recording, canary-inserting hook (module docstring). Made by dpaudit's trainer audit, not by users.

    ``num_real``: real records (dataset indices ``0 .. num_real - 1``); ``canary_index`` (m,): each canary's dataset
    index or -1 (coin tails: not in the data); ``probes``: coordinates recorded for the noise; ``scale_factor``: the
    canary gradient's value over the largest real per-example gradient norm of the first batch (at least 1);
    ``select_rows``: real rows of the first batch the coordinate choice looks at; ``seed``: the hook's own generator
    (coordinate choice only); ``watch_width``: the input width d whose first-layer weight is summed over the steps
    (module docstring; None: not recorded). ``canary_index`` may be empty (no gradient canary)."""

    active = True

    def __init__(self, *, num_real: int, canary_index: Sequence[int] | np.ndarray, probes: int = 256,
                 scale_factor: float = 1000.0, select_rows: int = 16, seed: int = 0,
                 max_steps: int = MAX_RECORDED_STEPS, watch_width: int | None = None) -> None:
        owner = "AuditHook"
        self.num_real = check_int(num_real, "num_real", owner, low=1)
        ci = np.asarray(canary_index, dtype=np.int64).ravel()
        if np.any((ci >= 0) & (ci < self.num_real)) or len(set(ci[ci >= 0].tolist())) != int((ci >= 0).sum()):
            raise ParameterError(f"The 'canary_index' parameter of {owner} must give each canary a distinct dataset "
                                 f"index >= num_real ({self.num_real}) or -1. Got {ci.tolist()[:8]}... instead.")
        self.canary_index = ci
        self.watch_width = None if watch_width is None else check_int(watch_width, "watch_width", owner, low=1)
        self._watch: tuple[int, int] | None = None     # (parameter position, axis)
        self._watch_sum: Any = None
        self.num_records = self.num_real + int((ci >= 0).sum())
        self.probes = check_int(probes, "probes", owner, low=2)
        self.scale_factor = float(scale_factor)
        self.select_rows = check_int(select_rows, "select_rows", owner, low=1)
        self.max_steps = check_int(max_steps, "max_steps", owner, low=1, high=MAX_RECORDED_STEPS)
        self._rng = np.random.default_rng([int(seed), 0x5EED])
        self._canary_of_row = {int(r): k for k, r in enumerate(ci) if r >= 0}
        self._row_lookup = np.full(self.num_records, -1, dtype=np.int64)
        for r, k in self._canary_of_row.items():
            self._row_lookup[r] = k
        self._pending: list[np.ndarray] = []
        self._queue: list[np.ndarray] = []           # Opacus: batch index lists drawn, first in, first out
        self._membership: list[np.ndarray] = []
        self._obs: list[Any] = []
        self._shapes: tuple[tuple[int, ...], ...] | None = None
        self._coords: list[tuple[int, int]] = []
        self._gather: list[tuple[int, Any]] = []      # (parameter position, index tensor) per touched parameter
        self._order: Any = None                        # permutation: gathered values -> canaries then probes
        self._canary_param: np.ndarray | None = None
        self._canary_flat: np.ndarray | None = None
        self.canary_scale = float("nan")
        self._params: list[Any] | None = None

    # ---------------------------------------------------------------------------------------------- set-up
    def _setup(self, tensors: list[Any], idx: np.ndarray) -> None:
        import torch

        m = self.canary_index.size
        shapes = tuple(tuple(int(s) for s in t.shape[1:]) for t in tensors)
        sizes = [int(np.prod(s)) if s else 1 for s in shapes]
        total = sum(sizes)
        if total < m + self.probes:
            raise DataError(f"The model has {total} trainable coordinates, fewer than the {m} canaries plus {self.probes} "
                            "probes of the audit: choose fewer canaries (--canaries) or a larger model.")
        real_rows = np.flatnonzero(idx < self.num_real)
        if real_rows.size > self.select_rows:
            real_rows = np.sort(self._rng.choice(real_rows, size=self.select_rows, replace=False))
        score = np.zeros(total, dtype=np.float64)
        norms = np.zeros(max(real_rows.size, 1))
        if real_rows.size:
            rows = torch.as_tensor(real_rows, device=tensors[0].device)
            off = 0
            sq = torch.zeros(real_rows.size, dtype=torch.float64, device=tensors[0].device)
            for t, n in zip(tensors, sizes):
                g = t.detach().index_select(0, rows).reshape(real_rows.size, -1).to(torch.float64)
                score[off:off + n] = g.abs().mean(0).cpu().numpy()
                sq += (g * g).sum(1)
                off += n
            norms = sq.sqrt().cpu().numpy()
        # smallest mean |g| first; random order among ties (dead coordinates are all exactly 0)
        tie = self._rng.permutation(total)
        ranked = tie[np.argsort(score[tie], kind="stable")[: m + self.probes]]
        # the probes get the quietest coordinates (real gradients there would inflate the noise estimate: safe, but
        # loose); the canaries the next ones, in random order (real gradients there only add variance)
        chosen = np.concatenate([self._rng.permutation(ranked[self.probes:]), ranked[: self.probes]])
        bounds = np.cumsum([0] + sizes)
        param = np.searchsorted(bounds, chosen, side="right") - 1
        flat = chosen - bounds[param]
        self._coords = [(int(p), int(f)) for p, f in zip(param, flat)]
        self._canary_param, self._canary_flat = param[:m], flat[:m]
        self._shapes = shapes
        if self.watch_width is not None:
            for pos, shape in enumerate(shapes):
                axes = [a for a, s in enumerate(shape) if s == self.watch_width]
                if axes:
                    self._watch = (pos, axes[-1])
                    break
        self.canary_scale = self.scale_factor * max(1.0, float(np.max(norms)) if norms.size else 1.0)
        # gather plan: per parameter the flat indices, and the order that maps the concatenation back
        pos_of: list[int] = []
        gather = []
        for p in sorted(set(param.tolist())):
            sel = np.flatnonzero(param == p)
            gather.append((p, torch.as_tensor(flat[sel], dtype=torch.long)))
            pos_of.extend(sel.tolist())
        self._gather = gather
        self._order = torch.as_tensor(np.argsort(np.asarray(pos_of)), dtype=torch.long)

    # ---------------------------------------------------------------------------------------------- plain loops
    def _insert(self, tensors: list[Any], idx: np.ndarray) -> None:
        if len(idx) != (int(tensors[0].shape[0]) if tensors else 0):
            raise ParameterError(f"The 'idx' parameter of hook.per_example must have one index per gradient row. Got "
                                 f"{len(idx)} indices for {int(tensors[0].shape[0])} rows instead.")
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_records):
            raise ParameterError(f"The 'idx' parameter of hook.per_example must hold dataset indices in [0, "
                                 f"{self.num_records}). Got {int(idx.min())}..{int(idx.max())} instead.")
        if self._shapes is None:
            self._setup(tensors, idx)
        self._pending.append(idx.copy())
        can = self._row_lookup[idx] if idx.size else idx
        rows = np.flatnonzero(can >= 0)
        if not rows.size:
            return
        import torch

        with torch.no_grad():
            for t in tensors:
                t[torch.as_tensor(rows, device=t.device)] = 0
            for r in rows:
                k = int(can[r])
                p, f = int(self._canary_param[k]), int(self._canary_flat[k])       # type: ignore[index]
                tensors[p][int(r)].view(-1)[f] = self.canary_scale

    def per_example(self, grads: Any, idx: Any) -> Any:
        """Record the batch's dataset indices ``idx`` and put the canary gradients into the rows of the canary
        records among them (in place; the same object is returned). ``grads``: per-example gradients, a dict
        ``name -> (B, ...)`` tensor or a sequence of them, in the optimizer's parameter order."""
        tensors = _as_list(grads)
        if not tensors:
            raise ParameterError("The 'grads' parameter of hook.per_example must hold at least one tensor. Got none.")
        self._insert(tensors, _indices(idx))
        return grads

    def _record(self, params: list[Any]) -> None:
        import torch

        if self._shapes is None:          # a step before any batch: nothing to observe yet
            raise DataError("The training function called optimizer.step() before hook.per_example saw a batch: the "
                            "hook cannot place its canaries. Call hook.per_example(grads, idx) on every batch.")
        if len(self._membership) >= self.max_steps:
            raise DataError(f"The training run took more than {self.max_steps} optimizer steps, the most an audit hook "
                            "records.")
        if self._params is None:
            shapes = tuple(tuple(int(s) for s in p.shape) for p in params)
            if shapes != self._shapes:
                raise DataError("The per-example gradients given to hook.per_example do not match the optimizer's "
                                f"parameters by position: shapes {list(self._shapes)} vs {list(shapes)}. List them in "
                                "the optimizer's order (model.named_parameters()).")
            self._params = params
        with torch.no_grad():
            parts = []
            for p, ix in self._gather:
                g = params[p].grad
                if g is None:
                    parts.append(torch.zeros(len(ix), dtype=torch.float64))
                else:
                    parts.append(g.detach().reshape(-1)[ix.to(g.device)].to(torch.float64))
            vals = torch.cat([v.cpu() for v in parts])[self._order] if parts else torch.zeros(0, dtype=torch.float64)
            if self._watch is not None:
                g = params[self._watch[0]].grad
                if g is not None:
                    g = g.detach().to(torch.float64)
                    self._watch_sum = g if self._watch_sum is None else self._watch_sum + g
        self._obs.append(vals)
        self._membership.append(np.concatenate(self._pending) if self._pending else np.zeros(0, dtype=np.int64))
        self._pending = []

    def optimizer(self, optimizer: Any) -> Any:
        """Record the privatised gradient at each ``optimizer.step()`` (a step pre-hook: after the user's noise,
        before the update). An Opacus ``DPOptimizer``: canary rows go into ``p.grad_sample`` before its clipping and
        ``p.grad`` is recorded after its noise and scaling; use :meth:`data_loader` on its data loader too."""
        try:
            from opacus.optimizers import DPOptimizer
        except ImportError:            # pragma: no cover - opacus is a dependency
            DPOptimizer = ()           # type: ignore[assignment]
        if isinstance(optimizer, DPOptimizer):
            return self._opacus(optimizer)
        if not hasattr(optimizer, "register_step_pre_hook"):
            raise ParameterError("The 'optimizer' parameter of hook.optimizer must be a torch.optim.Optimizer or an "
                                 f"Opacus DPOptimizer. Got {type(optimizer).__name__} instead.")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._record(params))
        return optimizer

    # ---------------------------------------------------------------------------------------------- Opacus
    def _opacus(self, dp: Any) -> Any:
        params = list(dp.params)
        clip = dp.clip_and_accumulate
        scale = dp.scale_grad

        def clip_and_accumulate() -> None:
            if not self._queue:
                raise DataError("The Opacus optimizer stepped without a recorded batch: wrap its data loader with "
                                "hook.data_loader(loader) as well.")
            idx = self._queue.pop(0)
            tensors = [dp._get_flat_grad_sample(p) for p in params]
            if idx.size:
                self._insert(tensors, idx)
                for p, t in zip(params, tensors):      # the flat view is p.grad_sample itself for one batch
                    if isinstance(p.grad_sample, list):
                        p.grad_sample = t
            elif self._shapes is not None:
                self._pending.append(idx)
            clip()

        def scale_grad() -> None:
            scale()
            if self._shapes is not None:
                self._record(params)

        dp.clip_and_accumulate = clip_and_accumulate
        dp.scale_grad = scale_grad
        return dp

    def data_loader(self, loader: Any) -> Any:
        """Record the index list of each batch an Opacus ``DPDataLoader`` (or any loader with a ``batch_sampler``)
        draws, first in, first out, for the optimizer wrapped by :meth:`optimizer`."""
        sampler = getattr(loader, "batch_sampler", None)
        if sampler is None:
            raise ParameterError("The 'loader' parameter of hook.data_loader must have a batch_sampler (an Opacus "
                                 f"DPDataLoader). Got {type(loader).__name__} instead.")
        hook = self
        cls = type(sampler)
        inner_iter = cls.__iter__

        def __iter__(this: Any):
            for batch in inner_iter(this):
                hook._queue.append(_indices(np.asarray(list(batch), dtype=np.int64)))
                yield batch

        # a DataLoader's batch_sampler cannot be replaced after it is made: the sampler object gets a subclass of
        # its own class whose iterator records each index list (nothing else changes)
        sampler.__class__ = type(f"Recording{cls.__name__}", (cls,), {"__iter__": __iter__})
        return loader

    # ---------------------------------------------------------------------------------------------- result
    def record(self) -> HookRecord:
        """What the hook saw (after the training function returned)."""
        if not self._obs:
            raise DataError("The training function made no optimizer step through the audit hook: attach it with "
                            "optimizer = hook.optimizer(optimizer) and grads = hook.per_example(grads, idx).")
        import torch

        obs = torch.stack(self._obs).numpy()
        m = self.canary_index.size
        watch = None
        if self._watch is not None:
            pos, axis = self._watch
            total = self._watch_sum
            if total is None:            # the parameter never had a gradient: it never moved
                total = torch.zeros((self._shapes or ())[pos], dtype=torch.float64)
            watch = total.movedim(axis, 0).reshape(self.watch_width, -1).cpu().numpy().copy()
        return HookRecord(canary_obs=obs[:, :m].copy(), probe_obs=obs[:, m:].copy(),
                          membership=tuple(self._membership), num_records=self.num_records, num_real=self.num_real,
                          canary_index=self.canary_index.copy(), canary_scale=float(self.canary_scale),
                          coordinates=tuple(self._coords), parameter_shapes=tuple(self._shapes or ()),
                          watch=watch, watch_parameter=tuple(self._watch or ()))
