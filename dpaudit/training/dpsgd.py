"""One DP-SGD step for M stacked models (Abadi et al. 2016), without per-example gradients where it can.

Every DP-SGD trainer in dpaudit (the ensemble trainer, ProxyFL's proxies) computes its private gradient
here. For model ``m`` with per-example gradients :math:`g_{m,i}` of the loss on its (padded) batch, a
0/1 ``mask`` marking the Poisson-sampled rows, clipping norm :math:`C`, noise multiplier :math:`\\sigma`
and expected batch size :math:`q_m n_m`:

.. math::
    \\tilde g_m = \\frac{1}{q_m n_m}\\Big(\\sum_i \\mathrm{mask}_{m,i}\\, f_{m,i}\\, g_{m,i}
        + c_m\\, \\gamma_m + \\sigma C\\, \\xi_m\\Big),\\qquad
    f_{m,i} = \\min\\Big(1, \\frac{C}{\\|g_{m,i}\\|_2 + 10^{-6}}\\Big),\\ \\xi_m \\sim \\mathcal N(0, I),

where :math:`\\gamma_m` is an optional white-box gradient canary (norm at most :math:`C`, added without
clipping again) and :math:`c_m \\in \\{0, 1\\}` its inclusion in this step.

Two ways to the clipped sum, same value (up to floating-point summation order; the float64 tests pin
them together):

``"ghost"`` (book-keeping; Bu et al. 2023, "Differentially private optimization on large model at small
    cost"; the "ghost norm" of Goodfellow 2015 and Li et al. 2022): one stacked forward pass that keeps each
    layer's input activations :math:`a` and one backward pass to each layer's outputs :math:`z` give, per
    example, ``||dL/dW||^2`` of a linear layer as ``||a||^2 ||dL/dz||^2``; of a convolution (im2col
    activations :math:`A` (T x D), output gradients :math:`G` (T x O)) as
    ``sum((A A^T) * (G G^T))`` or ``||G^T A||^2``, whichever is cheaper (T (D + O) vs D O); GroupNorm's
    per-example affine gradients are materialised (C numbers per example). The clipped sum is then one
    weighted matmul per layer, ``(f * G)^T A``. No per-example gradient of a weight matrix is stored.
``"per_example"`` (reference and fallback): ``vmap(grad)`` materialises every per-example gradient.

``method="auto"`` picks ``"ghost"`` when the module is a plain stack of supported layers (it exposes
``stages()`` like :func:`dpaudit.training.models.build_model`'s nets, or is an ``nn.Sequential``) of
``Linear`` on flat features, ``Conv1d``/``Conv2d`` (zero padding, one group), ``GroupNorm``, and
parameter-free elementwise or pooling layers, with no buffers and no active dropout; otherwise
``"per_example"``.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from dpaudit.errors import ParameterError, check_choice

__all__ = ["DPSGDStep", "BlockNoise", "NOISE_BLOCK", "cross_entropy_rows", "clip_factors", "noised_mean",
           "clip_and_noise", "poisson_masks", "DP_METHODS"]

DP_METHODS = ("auto", "ghost", "per_example")
CLIP_STABILISER = 1e-6  # f = min(1, C / (||g|| + 1e-6)), as Opacus
_MAX_WIDTH_GROUPS = 4  # the ghost path splits the models into at most this many groups of similar batch width,
_MODELS_PER_WIDTH_GROUP = 48  # each of at least this many models (a group costs a few ms of Python per step)

LossFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]

_ELEMENTWISE = (nn.ReLU, nn.Identity, nn.Tanh, nn.Sigmoid, nn.GELU, nn.ELU, nn.LeakyReLU, nn.SiLU)
_POOLS = (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d)


def cross_entropy_rows(logits: torch.Tensor, y: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
    """Per-row cross-entropy ``-log softmax(logits)[y] = logsumexp(logits) - logits[y]`` over the last axis
    (``extra`` unused).

    Written as logsumexp - gather: under ``vmap`` torch runs ``F.cross_entropy`` through a Python
    decomposition of ``nll_loss`` (which also imports sympy on first use, ~0.5 s), and ``log_softmax`` over a
    few classes costs three times as much (forward and backward) as this form, which has the same value and
    gradient.
    """
    return logits.logsumexp(-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def clip_factors(sq_norms: torch.Tensor, max_grad_norm: float, mask: torch.Tensor) -> torch.Tensor:
    """``min(1, C / (||g|| + 1e-6)) * mask`` from squared per-example norms (any shape, same as ``mask``)."""
    return (max_grad_norm / (sq_norms.sqrt() + CLIP_STABILISER)).clamp(max=1.0) * mask


def noised_mean(summed: torch.Tensor, noise: torch.Tensor, noise_multiplier: float, max_grad_norm: float,
                expected_batch: torch.Tensor) -> torch.Tensor:
    """``(summed + sigma C xi) / (q n)`` for stacked tensors (M, ...); ``expected_batch`` (M,)."""
    return (summed + noise * (noise_multiplier * max_grad_norm)) / _per_model(expected_batch, summed)


def _per_model(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(M,) values shaped to broadcast against ``like`` (M, *shape)."""
    return values.reshape((-1,) + (1,) * (like.dim() - 1))


def clip_and_noise(per_example: torch.Tensor, mask: torch.Tensor, clip: float, noise_multiplier: float,
                   expected_batch: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """DP-SGD's private gradient from materialised flat per-example gradients (M, L, P):
    :math:`\\frac{1}{qn}\\left(\\sum_{i \\in B} g_i \\min(1, C/(\\|g_i\\|_2 + 10^{-6})) + \\sigma C\\,\\xi\\right)`.

    ``mask``: (M, L) 1 for sampled records; ``expected_batch``: (M,) :math:`q_k n_k` (a fixed denominator,
    as Opacus does for Poisson sampling); ``noise``: (M, P) standard normal.
    """
    factor = clip_factors(per_example.pow(2).sum(-1), clip, mask)
    summed = torch.einsum("ml,mlp->mp", factor, per_example)
    return noised_mean(summed, noise, noise_multiplier, clip, expected_batch)


NOISE_BLOCK = 1 << 18  # numbers per noise block (BlockNoise): fixed, so the noise does not depend on the threads


class BlockNoise:
    """The standard normal noise of one DP-SGD step for every parameter of every model, drawn in blocks.

    The numbers of all tensors (in the order given) are laid end to end and cut into blocks of
    :data:`NOISE_BLOCK`; block ``b`` comes from its own torch generator seeded with the ``b``-th word of
    ``SeedSequence([seed, 0xB10C])``. Every number is an independent N(0, 1) draw, as from one generator; what
    block layout buys is speed: on the CPU the blocks are drawn by ``torch.get_num_threads()`` threads at once
    (torch's normal sampler is single-threaded and was a third of a DP-SGD step), and which numbers come out
    depends on ``seed`` only, never on the thread count. On other devices the whole draw is one block from a
    generator on that device.
    """

    def __init__(self, seed: int, block: int = NOISE_BLOCK):
        self.seed = int(seed)
        self.block = int(block)

    def draw(self, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Standard normals shaped (and typed, and placed) like each tensor of ``like``."""
        import numpy as np

        first = next(iter(like.values()))
        dev, dtype = first.device, first.dtype
        sizes = [v.numel() for v in like.values()]
        total = sum(sizes)
        flat = torch.empty(total, dtype=dtype, device=dev)
        if dev.type != "cpu":
            gen = torch.Generator(device=dev)
            gen.manual_seed(int(np.random.SeedSequence([self.seed, 0xB10C]).generate_state(1, np.uint64)[0] >> np.uint64(1)))
            flat.normal_(generator=gen)
        else:
            n_blocks = max(1, -(-total // self.block))
            seeds = np.random.SeedSequence([self.seed, 0xB10C]).generate_state(n_blocks, np.uint64) >> np.uint64(1)
            jobs = [(flat[b * self.block:(b + 1) * self.block], int(seeds[b])) for b in range(n_blocks)]
            _run_parallel(_fill_normal, jobs)
        out, at = {}, 0
        for (k, v), n in zip(like.items(), sizes):
            out[k] = flat[at:at + n].view(v.shape)
            at += n
        return out


def _fill_normal(job) -> None:
    part, seed = job
    gen = torch.Generator()
    gen.manual_seed(seed)
    part.normal_(generator=gen)


_POOL: list = []  # [ThreadPoolExecutor, its size], made on first use


def _run_parallel(fn, jobs: list) -> None:
    """``fn(job)`` for every job, on up to ``torch.get_num_threads()`` threads (torch releases the GIL in its
    kernels); in this thread when there is one job or one thread."""
    n = min(len(jobs), torch.get_num_threads())
    if n <= 1:
        for job in jobs:
            fn(job)
        return
    from concurrent.futures import ThreadPoolExecutor

    if not _POOL or _POOL[1] != n:
        if _POOL:
            _POOL[0].shutdown(wait=False)
        _POOL[:] = [ThreadPoolExecutor(max_workers=n, thread_name_prefix="dpaudit-noise"), n]
    for _ in _POOL[0].map(fn, jobs):
        pass


def poisson_masks(generators: list, rates: torch.Tensor, sizes: torch.Tensor, width: int,
                  gate: torch.Tensor | None = None) -> torch.Tensor:
    """Poisson sampling for one DP-SGD step of each model: (M, width) booleans, record i of model k included
    independently with probability ``rates[k]`` (only real records, i < sizes[k]; none when ``gate[k]`` is 0),
    drawn from model k's own generator."""
    sel = torch.stack([torch.rand(width, generator=g) < rates[i] for i, g in enumerate(generators)])
    sel &= torch.arange(width).unsqueeze(0) < sizes.unsqueeze(1)
    if gate is not None:
        sel &= gate.bool().unsqueeze(1)
    return sel


class _Unsupported(Exception):
    """The ghost path cannot run this module or input; the caller falls back to per-example gradients."""


def _stages(module: nn.Module) -> list[tuple[str, nn.Module]] | None:
    if hasattr(module, "stages") and callable(module.stages):
        return list(module.stages())
    if isinstance(module, nn.Sequential):
        return [(f"{name}.", layer) for name, layer in module.named_children()]
    return None


def _ghost_program(module: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The module's layers if the ghost path supports every one of them, else None."""
    stages = _stages(module)
    if stages is None or any(True for _ in module.buffers()):
        return None
    for _, layer in stages:
        if isinstance(layer, nn.Linear):
            continue
        if isinstance(layer, (nn.Conv1d, nn.Conv2d)):
            if layer.groups != 1 or layer.padding_mode != "zeros" or isinstance(layer.padding, str):
                return None
            continue
        if isinstance(layer, nn.GroupNorm):
            continue
        if isinstance(layer, nn.Flatten):
            if layer.start_dim != 1 or layer.end_dim != -1:
                return None
            continue
        if isinstance(layer, nn.Dropout):
            if layer.p > 0 and layer.training:
                return None
            continue
        if isinstance(layer, _ELEMENTWISE + _POOLS):
            continue
        return None  # a layer the ghost path does not know (or a nested container)
    n_stage_params = sum(p.numel() for _, layer in stages for p in layer.parameters())
    if n_stage_params != sum(p.numel() for p in module.parameters()):
        return None
    return stages


class DPSGDStep:
    """The DP-SGD step of one architecture, for stacked models.

    Parameters
    ----------
    module : torch.nn.Module
        One instance of the architecture (its weights are not used; stacked ``params`` are passed per call).
    loss : callable, optional
        ``loss(logits, y, extra) -> per-row loss`` over leading axes (default :func:`cross_entropy_rows`);
        ``extra`` is an optional per-row tensor (e.g. distillation targets) passed through from the call.
    method : {"auto", "ghost", "per_example"}
        See the module docstring. ``"ghost"`` on an unsupported module raises ``ParameterError``.
    """

    def __init__(self, module: nn.Module, *, loss: LossFn | None = None, method: str = "auto"):
        check_choice(method, "method", "DPSGDStep", DP_METHODS)
        self.module = module
        self.loss = cross_entropy_rows if loss is None else loss
        self.program = _ghost_program(module) if method != "per_example" else None
        if method == "ghost" and self.program is None:
            raise ParameterError(f"The 'method' parameter of DPSGDStep is 'ghost', but {type(module).__name__} has a "
                                 "layer, buffer or structure the ghost-norm path does not support; use 'auto'.")
        self.method = "ghost" if self.program is not None else "per_example"
        self.strict = method == "ghost"  # no silent fallback when the ghost path was asked for
        self._act_numel: dict[tuple, int] = {}  # per-example activation size by input shape (for chunking)
        self._per_model: dict[bool, Callable] = {}

    # -- public entry points ----------------------------------------------------------------------

    def private_grads(self, params: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor],
                      x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, *, max_grad_norm: float,
                      noise_multiplier: float, expected_batch: torch.Tensor,
                      noise: "torch.Generator | BlockNoise | Mapping[str, torch.Tensor]", extra: torch.Tensor | None = None,
                      canary_grads: Mapping[str, torch.Tensor] | None = None,
                      canary_mask: torch.Tensor | None = None, chunk_bytes: int = 1 << 29) -> dict[str, torch.Tensor]:
        """Every model's private gradient (see the module docstring), a dict of (M, *shape) tensors.

        ``x`` (M, W, *input), ``y`` (M, W), ``mask`` (M, W) 0/1 float; ``expected_batch`` (M,) the
        denominators :math:`q_m n_m`. ``noise``: a generator (standard normals drawn per parameter, in
        ``params`` order, shape (M, *shape), on its device), a :class:`BlockNoise` (the same distribution, drawn
        in blocks, in parallel on the CPU) or the standard normals themselves by name.
        ``canary_grads``: white-box gradient canaries by name, (M, *shape), each model's of L2 norm <= C
        over all its tensors (checked); ``canary_mask`` (M,) 0/1: whether model m includes its canary in
        this step (default: all). Canaries are added to the clipped sum before the noise, not clipped again.
        """
        C = float(max_grad_norm)
        summed, _ = self.clipped_sum(params, buffers, x, y, mask, C, extra=extra, chunk_bytes=chunk_bytes)
        if canary_grads is not None:
            self._add_canaries(summed, canary_grads, canary_mask, C)
        out = {}
        expected = torch.as_tensor(expected_batch).to(mask.device, mask.dtype)
        owned = isinstance(noise, BlockNoise)
        if owned:
            noise = noise.draw(summed)
        for k, v in summed.items():
            if isinstance(noise, torch.Generator):
                # drawn here, so worked on in place: the same numbers as noised_mean (addition commutes)
                # without three more parameter-sized allocations per step
                xi = torch.randn(v.shape, generator=noise, device=noise.device, dtype=v.dtype)
                out[k] = xi.mul_(noise_multiplier * C).add_(v).div_(_per_model(expected, v))
            elif owned:  # our own buffer: worked on in place
                out[k] = noise[k].mul_(noise_multiplier * C).add_(v).div_(_per_model(expected, v))
            else:
                out[k] = noised_mean(v, noise[k], noise_multiplier, C, expected)
        return out

    def mean_loss_grads(self, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                        mask: torch.Tensor) -> dict[str, torch.Tensor] | None:
        """Plain (non-private) training's gradients through the same stacked program: for every model, the
        gradient of its loss averaged over its real rows (``mask`` (M, W) 0/1), a dict of (M, *shape) tensors.
        None when the module has no stacked program (buffers, active dropout, unknown layers): the caller uses
        ``vmap`` over ``functional_call`` then. The same numbers as that way up to float rounding, without its
        per-layer batching overhead."""
        if self.program is None:
            return None
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        with torch.enable_grad():
            _, logits = self._forward(leaves, x, track=False)
            rows = self.loss(logits, y, None)
            losses = (rows * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            gs = torch.autograd.grad(losses.sum(), list(leaves.values()))
        return dict(zip(leaves.keys(), gs))

    def clipped_sum(self, params: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor], x: torch.Tensor,
                    y: torch.Tensor, mask: torch.Tensor, max_grad_norm: float, *, extra: torch.Tensor | None = None,
                    chunk_bytes: int = 1 << 29) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``(sum_i mask_i f_i g_i per parameter (M, *shape), squared per-example norms (M, W))``; the norms
        are those of the sampled rows (the ghost path may skip rows after a model's last sampled one: 0 there)."""
        if self.method == "ghost" and not buffers:
            try:
                return self._ghost_sum(params, x, y, mask, float(max_grad_norm), extra, chunk_bytes)
            except _Unsupported as exc:
                if self.strict:
                    raise ParameterError(f"DPSGDStep(method='ghost') cannot run this input: {exc}; use 'auto'.") from None
        return self._per_example_sum(params, buffers, x, y, mask, float(max_grad_norm), extra, chunk_bytes)

    # -- canaries ---------------------------------------------------------------------------------

    @staticmethod
    def _add_canaries(summed: dict, canary_grads: Mapping[str, torch.Tensor], canary_mask, C: float) -> None:
        if set(canary_grads) != set(summed):
            raise ParameterError(f"The 'canary_grads' parameter of DPSGDStep.private_grads must name every parameter "
                                 f"({sorted(summed)}). Got {sorted(canary_grads)} instead.")
        M = next(iter(summed.values())).shape[0]
        sq = sum(canary_grads[k].reshape(M, -1).double().pow(2).sum(1) for k in summed)
        if bool((sq.sqrt() > C * (1 + 1e-6)).any()):
            raise ParameterError(f"The 'canary_grads' parameter of DPSGDStep.private_grads must have L2 norm <= "
                                 f"max_grad_norm = {C} per model. Got norms up to {float(sq.sqrt().max()):.6g} instead.")
        for k, v in summed.items():
            g = canary_grads[k].to(v.device, v.dtype)
            if canary_mask is not None:
                g = g * torch.as_tensor(canary_mask).to(v.device, v.dtype).reshape((-1,) + (1,) * (v.dim() - 1))
            summed[k] = v + g

    # -- reference: materialised per-example gradients --------------------------------------------

    def _per_example_sum(self, params, buffers, x, y, mask, C, extra, chunk_bytes):
        M, W = mask.shape
        n_params = sum(v[0].numel() for v in params.values())
        mc = max(1, min(M, int(chunk_bytes // max(1, W * n_params * 4))))
        has_extra = extra is not None
        if has_extra not in self._per_model:
            base, loss = self.module, self.loss

            def ex_loss(p, b, x1, y1, *e1):
                logits = functional_call(base, (p, b), (x1.unsqueeze(0),))
                return loss(logits, y1.unsqueeze(0), e1[0].unsqueeze(0) if e1 else None).sum()

            dims = (0,) * (3 if has_extra else 2)
            per_ex = vmap(grad(ex_loss), in_dims=(None, None) + dims, randomness="different")
            self._per_model[has_extra] = vmap(per_ex, in_dims=(0, 0) + dims, randomness="different")
        per_model = self._per_model[has_extra]
        summed = {k: torch.empty_like(v) for k, v in params.items()}
        sq_all = torch.empty((M, W), dtype=mask.dtype, device=mask.device)
        for a in range(0, M, mc):
            sl = slice(a, min(M, a + mc))
            p = {k: v[sl].detach() for k, v in params.items()}
            b = {k: v[sl] for k, v in buffers.items()}
            g = per_model(p, b, x[sl], y[sl], *((extra[sl],) if has_extra else ()))  # each (mc, W, *shape)
            sq = sum(v.reshape(v.shape[0], v.shape[1], -1).pow(2).sum(-1) for v in g.values())
            factor = clip_factors(sq, C, mask[sl])
            for k, v in g.items():
                summed[k][sl] = torch.einsum("mw,mw...->m...", factor, v)
            sq_all[sl] = sq
        return summed, sq_all

    # -- ghost norms and book-keeping ---------------------------------------------------------------

    def _ghost_sum(self, params, x, y, mask, C, extra, chunk_bytes):
        """Models in groups of similar batch width: each group runs at the width its rows need (the last
        sampled row of its widest member), so Poisson batches padded to the widest of M models cost less;
        groups also keep the activations within ``chunk_bytes``."""
        M, W = mask.shape
        key = (tuple(x.shape[2:]), x.dtype)
        if key not in self._act_numel:
            with torch.no_grad():
                probe = {k: v[:1] for k, v in params.items()}
                records, _ = self._forward(probe, x[:1, :1], track=False)
            self._act_numel[key] = sum(r["a"].numel() + r["z"].numel() for r in records)
        per_model = W * self._act_numel[key] * x.element_size() * 4  # activations, output grads, temporaries
        mc = max(1, min(M, int(chunk_bytes // max(1, per_model))))
        used = ((mask != 0) * torch.arange(1, W + 1, device=mask.device)).amax(1)  # rows each model needs
        groups = max(-(-M // mc), min(_MAX_WIDTH_GROUPS, M // _MODELS_PER_WIDTH_GROUP))
        if groups <= 1:
            w = max(1, int(used.max()))
            s, sq = self._ghost_chunk(params, x[:, :w], y[:, :w], mask[:, :w], C, None if extra is None else extra[:, :w])
            return s, sq if w == W else F.pad(sq, (0, W - w))
        summed = {k: torch.empty_like(v) for k, v in params.items()}
        sq_all = torch.zeros((M, W), dtype=mask.dtype, device=mask.device)
        order = torch.argsort(used, stable=True)
        for idx in order.chunk(groups):
            w = max(1, int(used[idx].max()))
            sub = None if extra is None else extra[idx, :w]
            s, sq = self._ghost_chunk({k: v[idx] for k, v in params.items()}, x[idx, :w], y[idx, :w], mask[idx, :w],
                                      C, sub)
            for k, v in s.items():
                summed[k].index_copy_(0, idx, v)
            sq_all[idx, :w] = sq
        return summed, sq_all

    def _ghost_chunk(self, params, x, y, mask, C, extra):
        with torch.enable_grad():
            records, logits = self._forward({k: v.detach() for k, v in params.items()}, x, track=True)
            total = self.loss(logits, y, extra).sum()
            gz = torch.autograd.grad(total, [r["z"] for r in records])
        with torch.no_grad():
            sq = torch.zeros(mask.shape, dtype=logits.dtype, device=logits.device)
            for r, g in zip(records, gz):
                r["g"] = g
                sq += _layer_sq_norms(r)
            f = clip_factors(sq, C, mask)
            summed: dict[str, torch.Tensor] = {}
            for r in records:
                _layer_clipped_sum(r, f, summed)
        return {k: summed[k].reshape(v.shape) for k, v in params.items()}, sq

    def _forward(self, params, x, *, track: bool):
        """Run the stack on (M, W, *input) with stacked params; returns per-layer records and logits (M, W, C)."""
        M, W = x.shape[:2]
        h = x
        records: list[dict] = []
        first = True
        for prefix, layer in self.program:
            if isinstance(layer, nn.Linear):
                if h.dim() != 3:
                    raise _Unsupported("Linear on non-flat features")
                w = params[prefix + "weight"]
                z = torch.bmm(h, w.transpose(1, 2))
                if layer.bias is not None:
                    z = z + params[prefix + "bias"].unsqueeze(1)
                rec = {"kind": "linear", "prefix": prefix, "a": h, "bias": layer.bias is not None}
            elif isinstance(layer, (nn.Conv1d, nn.Conv2d)):
                z, rec, out_spatial = _conv_forward(layer, prefix, params, h)
            elif isinstance(layer, nn.GroupNorm):
                xhat = F.group_norm(h.reshape((M * W,) + tuple(h.shape[2:])), layer.num_groups, None, None,
                                    layer.eps).reshape(h.shape)
                if not layer.affine:
                    h = xhat
                    continue
                shape = (M, 1, h.shape[2]) + (1,) * (h.dim() - 3)
                z = xhat * params[prefix + "weight"].reshape(shape) + params[prefix + "bias"].reshape(shape)
                rec = {"kind": "groupnorm", "prefix": prefix, "a": xhat}
            elif isinstance(layer, nn.Flatten):
                h = h.reshape(M, W, -1)
                continue
            elif isinstance(layer, nn.Dropout):
                continue  # inactive (checked when the program was built)
            else:  # elementwise or pooling, row by row
                out = layer(h.reshape((M * W,) + tuple(h.shape[2:])))
                h = out.reshape((M, W) + tuple(out.shape[1:]))
                continue
            if track and first:
                z = z.detach().requires_grad_(True)  # the graph starts here: no parameter needs a gradient
                first = False
            rec["z"] = z
            records.append(rec)
            if rec["kind"] == "conv":  # (M, W, O, *spatial) as a channels-last view of z: no copy
                nd = len(out_spatial)
                h = z.reshape((M, W) + out_spatial + (rec["O"],)).permute((0, 1, 2 + nd) + tuple(range(2, 2 + nd)))
            else:
                h = z
        return records, h


class _StackedConv(torch.autograd.Function):
    """``z = a @ w_rows^T`` of stacked models' convolutions from the im2col rows ``a`` (M, W*T, D), differentiable in
    the layer's input ``x4`` (M*W, Cin, H, L): its gradient is one grouped transposed convolution over the M
    models on channels-last data, instead of autograd's way back through im2col (unfold_backward / col2im, which
    loop over elements or examples and cost several times more here)."""

    @staticmethod
    def forward(ctx, x4, a, w_rows, w, geom):
        ctx.geom = geom
        ctx.save_for_backward(w, a)
        return torch.bmm(a, w_rows.transpose(1, 2))

    @staticmethod
    def backward(ctx, gz):
        w, a = ctx.saved_tensors
        M, W, (H, L), (Ho, Lo), k, pad, stride, dil, out_pad = ctx.geom
        O, Cin = w.shape[1], w.shape[2]
        gx = g_rows = None
        if ctx.needs_input_grad[0]:
            # (M, W*Ho*Lo, O) -> (W, M*O, Ho, Lo) in channels-last memory: each model's channels one group
            g = gz.reshape(M, W, Ho, Lo, O).permute(1, 2, 3, 0, 4).reshape(W, Ho, Lo, M * O).permute(0, 3, 1, 2)
            gx = F.conv_transpose2d(g, w.reshape(M * O, Cin, k[0], k[1]), groups=M, padding=pad, stride=stride,
                                    dilation=dil, output_padding=out_pad)  # (W, M*Cin, H, L)
            gx = gx.reshape(W, M, Cin, H, L).transpose(0, 1).reshape(M * W, Cin, H, L)
        if ctx.needs_input_grad[2]:  # plain training (the weights are leaves there; the DP step detaches them)
            g_rows = torch.bmm(gz.transpose(1, 2), a)
        return gx, None, g_rows, None, None


def _conv_forward(layer, prefix, params, h):
    """im2col convolution of stacked models: (M, W, Cin, *spatial) -> z (M, W*T, O) and its record."""
    M, W = h.shape[:2]
    two_d = isinstance(layer, nn.Conv2d)
    if h.dim() != (5 if two_d else 4):
        raise _Unsupported("conv input rank")
    Cin = h.shape[2]
    if two_d:
        k, pad, stride, dil = layer.kernel_size, layer.padding, layer.stride, layer.dilation
        x4 = h.reshape((M * W, Cin) + tuple(h.shape[3:]))
    else:
        k, pad, stride, dil = (1, layer.kernel_size[0]), (0, layer.padding[0]), (1, layer.stride[0]), (1, layer.dilation[0])
        x4 = h.reshape(M * W, Cin, 1, h.shape[3])
    H, L = x4.shape[2], x4.shape[3]
    out_spatial = tuple(
        (s + 2 * p - d * (kk - 1) - 1) // st + 1 for s, p, d, kk, st in zip((H, L), pad, dil, k, stride)
    )
    T, D = out_spatial[0] * out_spatial[1], Cin * k[0] * k[1]
    with torch.no_grad():  # im2col rows (M, W*T, D), not differentiated; D in (kh, kw, Cin) order
        if dil == (1, 1):
            # a strided view of the channels-last input copied once: runs of kw*Cin contiguous numbers (F.unfold
            # loops over the examples; the (Cin, kh, kw) order would copy number by number)
            xc = x4.contiguous(memory_format=torch.channels_last)
            xp = F.pad(xc, (pad[1], pad[1], pad[0], pad[0])) if any(pad) else xc
            rows = xp.permute(0, 2, 3, 1).unfold(1, k[0], stride[0]).unfold(2, k[1], stride[1])  # (N, Ho, Lo, Cin, kh, kw)
            a = rows.permute(0, 1, 2, 4, 5, 3).reshape(M, W * T, D)
        else:
            cols = F.unfold(x4, k, dilation=dil, padding=pad, stride=stride)  # (N, Cin*kh*kw, T)
            a = cols.reshape(M * W, Cin, k[0], k[1], T).permute(0, 4, 2, 3, 1).reshape(M, W * T, D)
    w = params[prefix + "weight"]
    O = w.shape[1]
    w4 = w.reshape((M, O, Cin) + tuple(k))
    w_rows = w4.permute(0, 1, 3, 4, 2).reshape(M, O, D)  # the weight in a's (kh, kw, Cin) order
    if x4.requires_grad and torch.is_grad_enabled():
        out_pad = tuple(s_in - ((so - 1) * st - 2 * p + d * (kk - 1) + 1)
                        for s_in, so, st, p, d, kk in zip((H, L), out_spatial, stride, pad, dil, k))
        z = _StackedConv.apply(x4, a, w_rows, w4, (M, W, (H, L), out_spatial, k, pad, stride, dil, out_pad))
    else:
        z = torch.bmm(a, w_rows.transpose(1, 2))  # (M, W*T, O)
    if layer.bias is not None:
        z = z + params[prefix + "bias"].unsqueeze(1)
    rec = {"kind": "conv", "prefix": prefix, "a": a, "T": T, "O": O, "D": D, "bias": layer.bias is not None,
           "kernel": (Cin,) + tuple(k)}
    return z, rec, (out_spatial if two_d else out_spatial[1:])


def _layer_sq_norms(r: dict) -> torch.Tensor:
    """Squared per-example gradient norms (M, W) of one layer's parameters, from activations and output grads."""
    g = r["g"]
    if r["kind"] == "linear":
        gg = g.pow(2).sum(-1)
        sq = r["a"].pow(2).sum(-1) * gg
        return sq + gg if r["bias"] else sq
    if r["kind"] == "conv":
        M, WT, O = g.shape
        T, D = r["T"], r["D"]
        W = WT // T
        a = r["a"].reshape(M * W, T, D)
        gr = g.reshape(M * W, T, O)
        if T * (D + O) < D * O:  # ghost norm: <A A^T, G G^T>
            sq = (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(gr, gr.transpose(1, 2))).sum((1, 2))
        else:  # the per-example gradient is smaller than the two T x T Gram matrices
            sq = torch.bmm(gr.transpose(1, 2), a).pow(2).sum((1, 2))
        if r["bias"]:
            sq = sq + gr.sum(1).pow(2).sum(-1)
        return sq.reshape(M, W)
    dims = tuple(range(3, g.dim()))
    r["dw"] = (g * r["a"]).sum(dims) if dims else g * r["a"]  # (M, W, C) per-example affine gradients
    r["db"] = g.sum(dims) if dims else g
    return r["dw"].pow(2).sum(-1) + r["db"].pow(2).sum(-1)


def _layer_clipped_sum(r: dict, f: torch.Tensor, out: dict) -> None:
    """Add one layer's clipped sum ``sum_i f_i g_i`` (weight (M, O, D) or (M, O, Cin, kh, kw), bias (M, O)) to ``out``."""
    p = r["prefix"]
    g = r["g"]
    if r["kind"] == "linear":
        gf = g * f.unsqueeze(-1)
        out[p + "weight"] = torch.bmm(gf.transpose(1, 2), r["a"])
        if r["bias"]:
            out[p + "bias"] = gf.sum(1)
    elif r["kind"] == "conv":
        M, WT, O = g.shape
        T = r["T"]
        Cin, kh, kw = r["kernel"]
        gf = (g.reshape(M, WT // T, T, O) * f[:, :, None, None]).reshape(M, WT, O)
        # a's columns are in (kh, kw, Cin) order: back to the weight's (Cin, kh, kw)
        out[p + "weight"] = torch.bmm(gf.transpose(1, 2), r["a"]).reshape(M, O, kh, kw, Cin).permute(0, 1, 4, 2, 3)
        if r["bias"]:
            out[p + "bias"] = gf.sum(1)
    else:
        out[p + "weight"] = (r["dw"] * f.unsqueeze(-1)).sum(1)
        out[p + "bias"] = (r["db"] * f.unsqueeze(-1)).sum(1)

