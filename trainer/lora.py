"""LoRA adapters on a policy (``peft``), for training without updating the base weights.

``add_adapters`` wraps a policy's model in a ``peft`` model whose only trainable tensors are the
adapters (``LoRAConfig``). Saved policies stay plain ``save_pretrained`` directories that any tool
reloads: ``merged_state_dict`` gives the base weights with the adapters' deltas added, under the
plain model's key names, and ``save_adapter`` writes the adapter itself beside them (``adapter/``,
peft's format) so a resumed run continues from the exact adapter weights rather than from
merged ones rounded to a bf16 policy's dtype. ``adapters_off`` runs the base model alone: with
``grpo.beta > 0`` it is the KL reference, since the frozen base is the policy GRPO started from.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Iterator

import torch
from transformers.pytorch_utils import Conv1D  # GPT-2's linear layers (weight stored transposed)

from .config import LoRAConfig

ADAPTER_DIR = "adapter"  # inside a saved policy: the adapter that produced its merged weights
ADAPTER_NAME = "default"  # peft's name for a model's only adapter


def _peft():
    try:
        import peft
    except ImportError as exc:  # pragma: no cover - peft is a dependency of the train extra
        raise ImportError("lora.rank > 0 needs peft: pip install 'rods-gym[train]' (or pip install peft)") from exc
    return peft


def is_adapted(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or the module a DDP wrapper holds) is a peft model with adapters."""
    inner = getattr(model, "module", model)
    return hasattr(inner, "peft_config") and hasattr(inner, "get_base_model")


def _linear_names(model: torch.nn.Module) -> list[str]:
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, (torch.nn.Linear, Conv1D))})


def add_adapters(model: torch.nn.Module, cfg: LoRAConfig, seed: int = 0) -> torch.nn.Module:
    """``model`` with LoRA adapters of rank ``cfg.rank`` on ``cfg.target_modules``; the base weights are
    frozen. peft draws each ``lora_A`` at random (``lora_B`` starts at 0, so the adapted model equals the
    base): from torch's generator seeded with ``seed``, the caller's global RNG state untouched. A model
    that already has adapters is returned as it is (a second call must not nest them)."""
    if is_adapted(model):
        return model
    peft = _peft()
    targets: str | list[str] = "all-linear" if list(cfg.target_modules) == ["all-linear"] else list(cfg.target_modules)
    conv1d = any(isinstance(m, Conv1D) for m in model.modules())  # GPT-2 style layers store their weight transposed
    config = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
                             bias="none", task_type="CAUSAL_LM", fan_in_fan_out=conv1d)
    try:
        cuda = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
        with warnings.catch_warnings(), torch.random.fork_rng(devices=cuda):
            warnings.simplefilter("ignore", FutureWarning)  # peft asks about gradient checkpointing by a deprecated name
            torch.manual_seed(seed)
            return peft.get_peft_model(model, config)
    except ValueError as exc:
        raise ValueError(f"config lora.target_modules={list(cfg.target_modules)}: {exc} (this model's linear layers: "
                         f"{_linear_names(model)}; or all-linear)") from None


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER_NAME in module.lora_A:
            yield name, module


def merged_state_dict(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], float]:
    """The plain model's state dict: every base weight, each adapted layer's weight with its adapter's
    delta added (in fp32, then rounded once to the weight's dtype). The adapters stay as they are.

    Also how much of the update that rounding loses: the largest, over the adapted layers, of
    |round(W + delta) - W - delta| / |delta| (Frobenius norms). 0 for fp32 weights (up to float rounding);
    in bf16 a small update is mostly rounded away (8 significant bits)."""
    base = getattr(model, "module", model).get_base_model()
    out = {name.replace(".base_layer.", "."): tensor for name, tensor in base.state_dict().items()
           if ".lora_" not in name}
    lost = 0.0
    with torch.no_grad():
        for name, layer in _lora_layers(base):
            weight = layer.get_base_layer().weight
            delta = layer.get_delta_weight(ADAPTER_NAME).float()
            merged = (weight.float() + delta).to(weight.dtype)
            out[f"{name}.weight"] = merged
            norm = float(delta.norm())
            if norm > 0:
                lost = max(lost, float((merged.float() - weight.float() - delta).norm()) / norm)
    return out, lost


def merge_adapters(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model (adapters removed) holding the merged weights ``merged_state_dict`` computes:
    what a saved policy of ``model`` reloads as. Used when a warm start trained through adapters ends."""
    merged, _ = merged_state_dict(model)
    plain = getattr(model, "module", model).unload()
    plain.load_state_dict(merged)
    plain.requires_grad_(True)
    return plain


def save_adapter(model: torch.nn.Module, path: str | Path) -> None:
    # save_embedding_layers=False: peft's "auto" asks the Hugging Face Hub about the base model at every save
    getattr(model, "module", model).save_pretrained(Path(path), save_embedding_layers=False)


def load_adapter(model: torch.nn.Module, policy_dir: str | Path) -> None:
    """Set the adapter weights of ``model`` from a saved policy's ``adapter/`` (a checkpoint's)."""
    from safetensors.torch import load_file

    folder = Path(policy_dir) / ADAPTER_DIR
    file = folder / "adapter_model.safetensors"
    if not file.exists():
        raise FileNotFoundError(f"{folder} holds no adapter (adapter_model.safetensors): the checkpoint was written "
                                "by a run without lora.rank; resume it with the lora settings of its config.yaml")
    try:
        result = _peft().set_peft_model_state_dict(getattr(model, "module", model), load_file(str(file)))
    except RuntimeError as exc:  # a tensor of another shape: another rank
        raise ValueError(f"{file} does not fit this model's adapters ({str(exc).splitlines()[-1].strip()}): it was "
                         "saved with another lora.rank; resume with the lora settings of the run's config.yaml") from None
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"{file} does not fit this model's adapters (e.g. {unexpected[0]}): it was saved with other "
                         "lora.rank or lora.target_modules; resume with the lora settings of the run's config.yaml")


@contextlib.contextmanager
def adapters_off(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, ``model`` computes as its base model alone."""
    with getattr(model, "module", model).disable_adapter():
        yield
