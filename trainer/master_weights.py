"""fp32 master weights for a policy stored in bf16 or fp16 (mixed-precision training).

A policy loaded with ``policy.dtype: bfloat16`` runs its forward passes, rollouts and updates in bf16,
so that the update's log-probs equal the rollouts'. But an optimizer that steps bf16 weights directly
rounds most updates away: bf16 keeps 8 significant bits, so a step smaller than about 1/256 of a
weight leaves it where it was. At the learning rates used for pretrained models (1e-6) almost no
weight of a model initialised at std 0.02 would ever move. As in apex O2, DeepSpeed's bf16 optimizer
and FSDP's mixed precision, the optimizer here steps an fp32 copy of each low-precision parameter, and
the parameter receives the copy, rounded, after every step: updates accumulate in fp32 until they
show in bf16.

fp32 parameters are stepped in place, as before: for them this module copies nothing and changes
nothing.

fp16 also needs loss scaling: its smallest normal number is about 6e-5, so most gradients of a
language model's loss underflow to zero in fp16 backward passes. When some copied parameter is fp16,
the loss is multiplied by a dynamic scale before backward (``scale``), the gradients are unscaled in
their fp32 copies, and a step whose gradients overflowed (inf or nan) is skipped and the scale halved,
as ``torch.amp.GradScaler`` (which does the work here) does for autocast training. bf16 has fp32's
exponent range and is never scaled.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

INITIAL_LOSS_SCALE = 2.0 ** 16  # fp16's first loss scale (torch's GradScaler default); halved on every overflow


class MasterWeights:
    """The tensors an optimizer steps for ``params``: each fp32 parameter itself, or an fp32 copy of a
    low-precision one. Build the optimizer over :attr:`tensors`, backpropagate ``scale(loss)``, and call
    :meth:`step` instead of ``optimizer.step()`` once the parameters' gradients are ready."""

    def __init__(self, params: Iterable[torch.nn.Parameter], *, scale_loss: bool | None = None) -> None:
        """``scale_loss``: whether the backward passes run in fp16 and the loss must be scaled; None: when
        some of ``params`` is fp16. Pass it for a model whose frozen part is fp16 while what trains is
        fp32 (LoRA adapters on an fp16 base): its gradients flow through fp16 layers all the same."""
        self.params = list(params)
        self.tensors = [p if p.dtype == torch.float32 else p.detach().float().clone() for p in self.params]
        self.copied = [i for i, (p, t) in enumerate(zip(self.params, self.tensors)) if t is not p]
        if scale_loss is None:
            scale_loss = any(p.dtype == torch.float16 for p in self.params)
        device = self.params[0].device.type if self.params else "cpu"
        # dynamic loss scaling for fp16 (torch's GradScaler: x2 after 2,000 clean steps, /2 on overflow)
        self.scaler = torch.amp.GradScaler(device, init_scale=INITIAL_LOSS_SCALE) if scale_loss else None
        self.skipped = 0  # fp16 steps skipped because their gradients overflowed

    @property
    def active(self) -> bool:
        """Whether some parameter has an fp32 copy (the policy is not all fp32)."""
        return bool(self.copied)

    @property
    def loss_scale(self) -> float | None:
        """The current fp16 loss scale, or None when the loss is not scaled (no fp16 parameter)."""
        return None if self.scaler is None else float(self.scaler.get_scale())

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to backpropagate: ``loss`` times the loss scale in fp16, else ``loss`` itself."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def step(self, optimizer: torch.optim.Optimizer, max_norm: float | None = None,
             clip: Callable[[float], Any] | None = None) -> float | None:
        """One optimizer step: the parameters' gradients move to the copies (in fp32, leaving the
        parameters without gradients, as ``zero_grad`` would), the optimizer steps, and each
        parameter takes its copy's new value rounded to its own dtype.

        With ``max_norm``, the gradients are first clipped to that total norm, by ``clip(max_norm)`` on
        the parameters (e.g. accelerate's ``clip_grad_norm_``, which knows sharded models; torch's
        ``clip_grad_norm_`` when None) or, when the loss was scaled, on the unscaled fp32 copies. Returns
        the norm before clipping (None without ``max_norm``). A scaled step whose gradients hold an inf
        or nan is skipped, weights and optimizer state untouched (its norm is then inf or nan).
        """
        norm = None
        if self.scaler is None and max_norm is not None:
            norm = float(clip(max_norm) if clip is not None
                         else torch.nn.utils.clip_grad_norm_([p for p in self.params if p.grad is not None], max_norm))
        for i in self.copied:
            p, t = self.params[i], self.tensors[i]
            t.grad = None if p.grad is None else p.grad.detach().float()
            p.grad = None
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.unscale_(optimizer)
            if max_norm is not None:
                norm = float(torch.nn.utils.clip_grad_norm_([t for t in self.tensors if t.grad is not None], max_norm))
            before = self.scaler.get_scale()
            self.scaler.step(optimizer)  # skipped when unscale_ found an inf or nan
            self.scaler.update()
            self.skipped += int(self.scaler.get_scale() < before)
        with torch.no_grad():
            for i in self.copied:
                self.params[i].copy_(self.tensors[i])
        return norm

    def state_dict(self) -> list[torch.Tensor] | None:
        """The fp32 copies (for a checkpoint; a resumed run must not restart them from the rounded
        weights), or None when there are none."""
        return [self.tensors[i].detach().clone() for i in self.copied] or None

    def scaler_state_dict(self) -> dict[str, Any] | None:
        """The fp16 loss scaler's state (scale, clean steps since it last grew), or None without one."""
        return None if self.scaler is None else {**self.scaler.state_dict(), "skipped": self.skipped}

    def load_scaler_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Restore ``scaler_state_dict``'s state. ``None`` (a checkpoint of a run without fp16, or one written
        before loss scaling existed) keeps the initial scale."""
        if state is None or self.scaler is None:
            return
        state = dict(state)
        self.skipped = int(state.pop("skipped", 0))
        self.scaler.load_state_dict(state)

    def load_state_dict(self, state: Sequence[torch.Tensor] | None) -> None:
        """Restore the copies a checkpoint saved. ``None`` (a checkpoint of an fp32 run, or one written
        before master weights existed) keeps the copies taken from the parameters."""
        if state is None:
            return
        if len(state) != len(self.copied):
            raise ValueError(f"the checkpoint holds {len(state)} fp32 master weights, this policy has "
                             f"{len(self.copied)} low-precision parameters: it is another model or dtype")
        with torch.no_grad():
            for i, saved in zip(self.copied, state):
                if saved.shape != self.tensors[i].shape:
                    raise ValueError(f"fp32 master weight {i} has shape {tuple(saved.shape)} in the checkpoint, "
                                     f"{tuple(self.tensors[i].shape)} here: the checkpoint is of another model")
                self.tensors[i].copy_(saved)


def runs_in_fp16(model: torch.nn.Module) -> bool:
    """Whether some of ``model``'s parameters (trained or frozen) are fp16: its backward passes then need
    loss scaling (``MasterWeights(..., scale_loss=...)``)."""
    return any(p.dtype == torch.float16 for p in model.parameters())
