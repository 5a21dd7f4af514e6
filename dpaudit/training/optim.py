"""One optimizer for stacked models: Adam and SGD (momentum, L2 weight decay) on tensors ``(M, *shape)``.

Every trainer that updates many models at once (the ensemble trainer, ProxyFL's clients, a server's
single model with ``M = 1``) uses :class:`StackedOptimizer`. For each model it applies, elementwise, the
update ``torch.optim.Adam`` / ``torch.optim.SGD`` applies to that model alone (coupled weight decay:
``g <- g + wd * p``; Adam betas (0.9, 0.999), eps 1e-8; SGD momentum buffer initialised to the first
gradient, no dampening, no Nesterov). Step counts are per model, so models that skip steps (ended data
streams, clients without a step left) keep their own bias corrections.

Arithmetic. With every stepped model at the same step count, Adam runs either torch's fused kernel
(``torch._fused_adam_``, the kernel behind ``torch.optim.Adam(fused=True)``; ``fused=True``, the default)
or the exact in-place sequence of ``torch.optim.Adam``'s single-tensor path with Python-float bias
corrections (``fused=False``; bit-identical to ``torch.optim.Adam()`` on the CPU). Models at different
step counts take a per-model broadcast form of the same formula (equal up to rounding).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from dpaudit.errors import ParameterError, check_bool, check_choice, check_float

__all__ = ["StackedOptimizer", "ADAM_BETAS", "ADAM_EPS", "OPTIMIZERS"]

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
OPTIMIZERS = ("adam", "sgd")
_FUSED_ADAM = getattr(torch, "_fused_adam_", None)  # torch's fused Adam kernel (CPU and CUDA), if present


class StackedOptimizer:
    """Adam / SGD on stacked tensors, with per-model step counts.

    Parameters
    ----------
    params : dict of str -> tensor (M, *shape)
        The stacked parameters (only their shapes, dtypes and devices are read here).
    kind : {"adam", "sgd"}
    lr : float > 0
    momentum : float in [0, 1)
        SGD momentum (Adam ignores it).
    weight_decay : float >= 0
        L2 penalty added to the gradient (``torch.optim`` semantics, not decoupled).
    fused : bool
        Use torch's fused Adam kernel when every stepped model shares one step count (see the module
        docstring); ``False`` reproduces ``torch.optim.Adam()`` bit for bit.

    ``update(params, grads, sel)`` steps the models ``sel`` (a device index tensor; None = all), whose
    parameters and gradients are given stacked in that order; the other models' moments and step counts
    stay untouched. :meth:`update_where` does the gathering and scattering for a full stack and a mask.
    :meth:`state` / :meth:`load` give the state as flat tensors (``opt/step``, ``opt/<slot>/<name>``) for
    safetensors checkpoints.
    """

    def __init__(self, params: Mapping[str, torch.Tensor], *, kind: str = "adam", lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, fused: bool = True):
        o = "StackedOptimizer"
        self.kind = check_choice(kind, "kind", o, OPTIMIZERS)
        self.lr = check_float(lr, "lr", o, low=0.0, low_open=True)
        self.momentum = check_float(momentum, "momentum", o, low=0.0, high=1.0, high_open=True)
        self.weight_decay = check_float(weight_decay, "weight_decay", o, low=0.0)
        self.fused = check_bool(fused, "fused", o)
        if not params:
            raise ParameterError("The 'params' parameter of StackedOptimizer must hold at least one tensor.")
        M = next(iter(params.values())).shape[0]
        self.step = np.zeros(M, dtype=np.float64)
        self.slots: dict[str, dict[str, torch.Tensor]] = {}
        if self.kind == "adam":
            self.slots["exp_avg"] = {k: torch.zeros_like(v) for k, v in params.items()}
            self.slots["exp_avg_sq"] = {k: torch.zeros_like(v) for k, v in params.items()}
        elif self.momentum > 0:
            self.slots["momentum_buffer"] = {k: torch.zeros_like(v) for k, v in params.items()}

    def state(self) -> dict[str, torch.Tensor]:
        """The optimizer state as named tensors (the slots are the live tensors, not copies)."""
        out = {"opt/step": torch.from_numpy(self.step.copy())}
        for slot, d in self.slots.items():
            out.update({f"opt/{slot}/{k}": v for k, v in d.items()})
        return out

    def load(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Restore a :meth:`state` (copied into the existing tensors)."""
        self.step[:] = torch.as_tensor(tensors["opt/step"]).cpu().double().numpy()
        for slot, d in self.slots.items():
            for k in d:
                d[k].copy_(tensors[f"opt/{slot}/{k}"])

    @torch.no_grad()
    def update_where(self, params: dict[str, torch.Tensor], grads: Mapping[str, torch.Tensor],
                     active: np.ndarray | None = None) -> None:
        """Step the models whose ``active`` entry is true (all when None), in place in the full stack ``params``;
        ``grads`` is stacked over all M models (rows of inactive models are ignored)."""
        if active is None or bool(np.all(active)):
            self.update(params, grads, None)
            return
        sel_np = np.flatnonzero(active)
        if len(sel_np) == 0:
            return
        dev = next(iter(params.values())).device
        sel = torch.from_numpy(sel_np).to(dev)
        p_sel = {k: v.index_select(0, sel) for k, v in params.items()}
        self.update(p_sel, {k: v.index_select(0, sel) for k, v in grads.items()}, sel)
        for k, v in p_sel.items():
            params[k].index_copy_(0, sel, v)

    @torch.no_grad()
    def update(self, params: dict[str, torch.Tensor], grads: Mapping[str, torch.Tensor], sel: torch.Tensor | None) -> None:
        """One step of the models ``sel`` (None = all), in place in ``params`` (stacked in ``sel`` order)."""
        sel_np = slice(None) if sel is None else sel.cpu().numpy()
        t = self.step[sel_np] + 1
        if sel is None:
            slots = self.slots
        else:
            slots = {name: {k: v.index_select(0, sel) for k, v in d.items()} for name, d in self.slots.items()}
        uniform = bool(np.all(t == t[0]))
        if self.kind == "adam":
            self._adam(params, grads, slots, t, uniform)
        else:
            self._sgd(params, grads, slots, t, uniform)
        if sel is not None:
            for name, d in slots.items():
                for k, v in d.items():
                    self.slots[name][k].index_copy_(0, sel, v)
        self.step[sel_np] = t

    def _adam(self, params, grads, slots, t: np.ndarray, uniform: bool) -> None:
        b1, b2 = ADAM_BETAS
        lr, wd = self.lr, self.weight_decay
        dev = next(iter(params.values())).device
        fused_ok = all(v.is_contiguous() for d in (params, *slots.values()) for v in d.values())
        if uniform and self.fused and _FUSED_ADAM is not None and fused_ok:
            # one fused pass per tensor: the kernel behind torch.optim.Adam(fused=True), elementwise per model
            keys = list(params)
            steps = [torch.tensor(float(t[0]), dtype=torch.float32, device=dev) for _ in keys]
            _FUSED_ADAM(
                # the kernel assumes every tensor has the parameter's (contiguous) layout
                [params[k] for k in keys], [grads[k].contiguous() for k in keys], [slots["exp_avg"][k] for k in keys],
                [slots["exp_avg_sq"][k] for k in keys], [], steps, amsgrad=False, lr=lr, beta1=b1,
                beta2=b2, weight_decay=wd, eps=ADAM_EPS, maximize=False,
                grad_scale=None, found_inf=None,
            )
            return
        if uniform:  # torch.optim.Adam's single-tensor arithmetic, Python-float bias corrections
            step = float(t[0])
            step_size = lr / (1 - b1**step)
            bc2_sqrt = (1 - b2**step) ** 0.5
        else:
            step_size_np = lr / (1 - b1**t)
            bc2_sqrt_np = np.sqrt(1 - b2**t)
        for k, p in params.items():
            g = grads[k]
            if wd:
                g = g.add(p, alpha=wd)
            m, v = slots["exp_avg"][k], slots["exp_avg_sq"][k]
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            if uniform:
                denom = (v.sqrt() / bc2_sqrt).add_(ADAM_EPS)
                p.addcdiv_(m, denom, value=-step_size)
            else:
                denom = (v.sqrt() / _per_model(bc2_sqrt_np, p)).add_(ADAM_EPS)
                p.sub_(_per_model(step_size_np, p) * m / denom)

    def _sgd(self, params, grads, slots, t: np.ndarray, uniform: bool) -> None:
        for k, p in params.items():
            g = grads[k]
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            if self.momentum > 0:
                buf = slots["momentum_buffer"][k]
                if uniform:
                    if t[0] == 1:
                        buf.copy_(g)
                    else:
                        buf.mul_(self.momentum).add_(g)
                else:
                    first = _per_model((t == 1).astype(np.float64), p).bool()
                    buf.copy_(torch.where(first, g, buf * self.momentum + g))
                g = buf
            p.add_(g, alpha=-self.lr)


def _per_model(values: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A per-model value (M,) as a tensor broadcasting against ``like`` (M, *shape)."""
    return torch.from_numpy(values).to(like.device, like.dtype).reshape((-1,) + (1,) * (like.dim() - 1))
