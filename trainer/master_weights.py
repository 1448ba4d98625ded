"""fp32 master weights for a policy stored in bf16 (mixed-precision training).

A policy loaded with ``policy.dtype: bfloat16`` runs its forward passes, rollouts and updates in bf16,
so that the update's log-probs equal the rollouts'. But an optimizer that steps bf16 weights directly
rounds most updates away: bf16 keeps 8 significant bits, so a step smaller than about 1/256 of a
weight leaves it where it was. At the learning rates used for pretrained models (1e-6) almost no
weight of a model initialised at std 0.02 would ever move. As in apex O2, DeepSpeed's bf16 optimizer
and FSDP's mixed precision, the optimizer here steps an fp32 copy of each low-precision parameter, and
the parameter receives the copy, rounded, after every step: updates accumulate in fp32 until they
show in bf16. bf16 has fp32's exponent range, so no loss scaling is needed.

fp32 parameters are stepped in place: for them this module copies nothing and changes nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch


class MasterWeights:
    """The tensors an optimizer steps for ``params``: each fp32 parameter itself, or an fp32 copy of a
    low-precision one. Build the optimizer over :attr:`tensors` and call :meth:`step` instead of
    ``optimizer.step()`` once the parameters' gradients are ready."""

    def __init__(self, params: Iterable[torch.nn.Parameter]) -> None:
        self.params = list(params)
        if any(p.dtype == torch.float16 for p in self.params):
            raise ValueError("fp16 parameters need loss scaling, which the trainer does not do: load the policy in "
                             "bfloat16 or float32 (policy.dtype)")
        self.tensors = [p if p.dtype == torch.float32 else p.detach().float().clone() for p in self.params]
        self.copied = [i for i, (p, t) in enumerate(zip(self.params, self.tensors)) if t is not p]

    @property
    def active(self) -> bool:
        """Whether some parameter has an fp32 copy (the policy is not all fp32)."""
        return bool(self.copied)

    def step(self, optimizer: torch.optim.Optimizer, max_norm: float | None = None,
             clip: Callable[[float], Any] | None = None) -> float | None:
        """One optimizer step: the parameters' gradients move to the copies (in fp32, leaving the
        parameters without gradients, as ``zero_grad`` would), the optimizer steps, and each
        parameter takes its copy's new value rounded to its own dtype.

        With ``max_norm``, the gradients are first clipped to that total norm, by ``clip(max_norm)`` on
        the parameters (e.g. accelerate's ``clip_grad_norm_``, which knows sharded models; torch's
        ``clip_grad_norm_`` when None). Returns the norm before clipping (None without ``max_norm``).
        """
        norm = None
        if max_norm is not None:
            norm = float(clip(max_norm) if clip is not None
                         else torch.nn.utils.clip_grad_norm_([p for p in self.params if p.grad is not None], max_norm))
        for i in self.copied:
            p, t = self.params[i], self.tensors[i]
            t.grad = None if p.grad is None else p.grad.detach().float()
            p.grad = None
        optimizer.step()
        with torch.no_grad():
            for i in self.copied:
                self.params[i].copy_(self.tensors[i])
        return norm

    def state_dict(self) -> list[torch.Tensor] | None:
        """The fp32 copies (for a checkpoint; a resumed run must not restart them from the rounded
        weights), or None when there are none."""
        return [self.tensors[i].detach().clone() for i in self.copied] or None

    def load_state_dict(self, state: Sequence[torch.Tensor] | None) -> None:
        """Restore the copies a checkpoint saved. ``None`` (a checkpoint of an fp32 run) keeps the copies taken
        from the parameters."""
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
