"""The checks a run makes before it does any work, so that a mistake fails in one line, not minutes in.

``check_lone_launch`` (an ``accelerate launch`` that started one process where several were asked) runs when
``rods train`` starts; ``check_policy_for_run`` is what ``rods train``, ``rods sft`` and ``rods evaluate`` check of
a policy and the task sets before any episode: the env id's difficulty, the policy's view, its positions, its
action-token budget, its vocabulary, the chat template and the first prompts' lengths. Each check raises a
one-line ``ValueError`` or warns (a ``UserWarning``, also returned) where the run is valid but likely not meant.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym
import jinja2

from rods_gym.registration import DIFFICULTY_NAMES
from rods_gym.task import TaskSpec

from .config import TrainConfig, env_kwargs
from .loop import evaluation_engine
from .policy import Policy, check_policy_view, longest_compact_call
from .rollout import conversation_start, prompt_overflow
from .sft import oracle_episode
from .tasks import spread
from .transcript import ChatCodec, TemplateError


def launched_processes() -> int:
    """The number of processes this one was launched among, known before any process group exists:
    ``WORLD_SIZE`` (``accelerate launch``, ``torchrun``), else an MPI launcher's size (``mpirun``, as
    accelerate's multi-CPU launch uses), else 1 (run directly)."""
    for name in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if os.environ.get(name):
            return int(os.environ[name])
    return 1


def check_lone_launch() -> str | None:
    """``accelerate launch --num_processes N`` without ``--multi_gpu`` (or with ``--cpu``) starts a single
    process and says nothing. Detected from the launcher's command line (Linux ``/proc``): a
    warning, since the run is correct, only not parallel. Returns the message (None: nothing to say)."""
    if launched_processes() > 1 or "ACCELERATE_MIXED_PRECISION" not in os.environ:
        return None  # a multi-process launch, or not launched by accelerate
    try:
        argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in argv]
    asked = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--num_processes"), None)
    asked = asked or next((a.split("=", 1)[1] for a in args if a.startswith("--num_processes=")), None)
    if asked is None or not asked.isdigit() or int(asked) < 2:
        return None
    cpu = " and drop --cpu" if "--cpu" in args else ""
    message = (f"accelerate launch was asked for --num_processes {asked} but started this one process alone: it "
               f"starts several only with --multi_gpu and without --cpu (on a machine without GPUs, --multi_gpu "
               f"runs them on the CPU with gloo); add --multi_gpu{cpu}")
    warnings.warn(message, stacklevel=2)
    return message


def check_policy_for_run(cfg: TrainConfig, policy: Policy, mode: str, task_sets: Mapping[str, Sequence[TaskSpec]], *,
                         vocabulary: bool = True) -> None:
    """What ``rods train``, ``rods sft`` and ``rods evaluate`` check of a policy before any episode (each a one-line
    ``ValueError``; some only warn): a difficulty named in the env id, the policy's view, its positions, its
    action-token budget, its vocabulary for the view (``vocabulary``), the chat template (chat view, on the first
    task of ``task_sets``) and the first prompts of every task set against ``rollout.max_context``."""
    check_env_difficulty(cfg)
    check_policy_view(policy, mode, cfg.data.env_id)
    check_model_positions(cfg, policy)
    check_action_tokens(cfg, policy, mode)
    if vocabulary:
        check_view_vocabulary(cfg, policy)
    first = next((task for tasks in task_sets.values() for task in tasks), None)
    if mode == "chat" and first is not None:
        check_chat_template(cfg, policy, first)
    check_prompts_fit(cfg, policy, task_sets)


def check_env_difficulty(cfg: TrainConfig) -> str | None:
    """A warning (also returned) when ``data.env_id`` names a difficulty (``rods/ToolChain-Easy-Compact-v0``):
    a difficulty preset only shapes the tasks an environment samples for itself, and the trainer always
    hands it a task from a task set (``data.train_split``, ``eval.splits``, the source's), so only the
    id's view counts. Choose tasks by split or JSONL file instead."""
    named = [name for name in DIFFICULTY_NAMES if f"-{name}-" in cfg.data.env_id]
    if not named:
        return None
    message = (f"data.env_id {cfg.data.env_id!r} names the {named[0].lower()} difficulty, which has no effect here: "
               f"every episode plays a task from a task set ({cfg.data.train_split}, eval on "
               f"{', '.join(cfg.eval.splits)}), whatever the preset; only the view counts. For easier or harder "
               "tasks, point data.train_split / eval.splits at a JSONL task set (rods synth, rods tasksets)")
    warnings.warn(message, stacklevel=2)
    return message


def check_model_positions(cfg: TrainConfig, policy: Policy) -> None:
    """A ``ValueError`` when ``rollout.max_context`` exceeds the positions the model has
    (``max_position_embeddings``, GPT-2's ``n_positions``): a model with absolute position embeddings fails
    with an index error once an episode grows past them, one with rotary ones runs beyond what it was
    trained for. Models whose config names no limit are not checked."""
    text = policy.model.config.get_text_config()
    # the name config.json spells it with (GPT-2's n_positions is also readable as max_position_embeddings)
    key = next((k for k in ("max_position_embeddings", "n_positions") if isinstance(vars(text).get(k), int)),
               None)
    if key is None or cfg.rollout.max_context <= vars(text)[key]:
        return
    limit = vars(text)[key]
    embedded = " or a larger policy.max_positions (the embedded model)" if cfg.policy.model == "tiny" else ""
    raise ValueError(f"rollout.max_context={cfg.rollout.max_context} exceeds the {limit} positions of policy "
                     f"{policy.name} ({key} in its config): episodes would run past them; set "
                     f"rollout.max_context={limit}{embedded}")


def check_action_tokens(cfg: TrainConfig, policy: Policy, mode: str) -> str | None:
    """A warning (also returned) when ``rollout.max_action_tokens`` cannot hold the compact view's
    longest call: every episode that needs that call then fails however good the policy (a typed
    slot id is two tokens). Not an error: a short budget is a valid choice for task sets without long calls."""
    if mode != "compact":
        return None
    need = longest_compact_call(policy, slot_ids=cfg.data.slot_ids)
    if cfg.rollout.max_action_tokens >= need:
        return None
    message = (f"rollout.max_action_tokens={cfg.rollout.max_action_tokens} cuts the compact view's longest call short "
               f"({need} tokens with data.slot_ids={cfg.data.slot_ids}); set it to at least {need} unless the run's "
               "tasks never call a tool with that many parameters")
    warnings.warn(message, stacklevel=2)
    return message


def check_view_vocabulary(cfg: TrainConfig, policy: Policy, episodes: int = 3) -> str | None:
    """A warning (also returned) when the policy's tokenizer maps more than 5% of the tokens of the
    environment's episodes (observations and the oracle's actions of ``episodes`` sampled tasks) to its
    unknown token: a policy saved for another view or other slot ids (the embedded compact tokenizer
    in the chat view, ordered ids evaluated with typed ones) would otherwise run, and fail, silently.
    Tokenizers without an unknown token (byte-level ones) are never warned about."""
    tok = policy.tokenizer
    if tok.unk_token_id is None:
        return None
    env = gym.make(cfg.data.env_id, **env_kwargs(cfg))
    texts: list[str] = []
    for seed in range(episodes):
        for obs, action in oracle_episode(env, seed):
            texts += [str(obs), str(action)]
    env.close()
    ids = [i for row in tok(texts, add_special_tokens=False)["input_ids"] for i in row]
    unknown = sum(i == tok.unk_token_id for i in ids) / max(len(ids), 1)
    if unknown <= 0.05:
        return None
    message = (f"the policy's tokenizer ({policy.name}) does not know {unknown:.0%} of the tokens of {cfg.data.env_id}'s "
               f"episodes (data.slot_ids={cfg.data.slot_ids}): was it saved for another view or other slot ids? Use the "
               "config it was trained with (--config NAME, or rods evaluate --run-dir RUN)")
    warnings.warn(message, stacklevel=2)
    return message


PROBE_REPLY, PROBE_USER = "Done.", "Thanks. One more thing."


def check_chat_template(cfg: TrainConfig, policy: Policy, task: TaskSpec) -> None:
    """The chat view's conversations through the policy's chat template, before any work (``ValueError``, one
    line): the first prompt of ``task`` must name every tool of the task (a template that ignores ``tools=``
    would train a policy that never sees its tools), and a probe conversation in the view's shapes (system,
    user, an assistant tool call, its tool result, an assistant reply, the user's next message) must render
    and stay prefix-stable, as every rollout needs: a template that refuses a role (``Conversation roles must
    alternate``) or rewrites earlier turns fails here, not mid-run."""
    env = gym.make(cfg.data.env_id, **env_kwargs(cfg))
    obs, _ = env.reset(seed=0, options={"task": task})
    messages, tools = conversation_start(env, obs)
    env.close()
    codec = ChatCodec(policy)
    names = [t.get("function", t)["name"] for t in tools or []]
    what = "the chat view's first prompt (system and user messages, tools=...)"
    try:
        tr = codec.start(messages, tools)
        missing = [n for n in names if n not in tr.text]
        if missing:
            raise ValueError(f"the chat template of policy {policy.name} ignores the tools: the first prompt of "
                             f"task {task.id!r} does not name {', '.join(missing)}, so the policy would never see "
                             "them; use a tokenizer whose chat_template renders tools (it receives them as "
                             "tools=[...] JSON schemas)")
        if not names:
            return
        what = "a probe conversation (system, user, assistant tool call, tool result, assistant, user)"
        call = "<tool_call>" + json.dumps({"name": names[0], "arguments": {}}) + "</tool_call>"
        turns = [[{"role": "assistant", "content": call}, {"role": "tool", "name": names[0], "content": "{}"}],
                 [{"role": "assistant", "content": PROBE_REPLY}, {"role": "user", "content": PROBE_USER}]]
        for action, reply in turns:
            tr.add_action(codec.action_ids(action["content"]))
            messages = [*messages, action, reply]
            codec.continue_after_action(tr, messages, 1, tools, stopped=True)
    except jinja2.TemplateError as exc:
        raise ValueError(f"the chat template of policy {policy.name} cannot render {what}: "
                         f"{type(exc).__name__}: {exc}") from exc
    except TemplateError as exc:
        raise ValueError(f"{exc} (found rendering {what})") from exc


def check_prompts_fit(cfg: TrainConfig, policy: Policy, task_sets: Mapping[str, Sequence[Any]],
                      per_set: int = 32) -> None:
    """Refuse (``ValueError``) a task set none of whose first prompts leaves room for an action within
    ``rollout.max_context`` (every episode would end untouched, and the run would learn nothing while
    finishing normally); warn where only some do not. ``per_set`` tasks evenly spaced over each set."""
    engine = evaluation_engine(cfg, policy)
    s = engine.settings
    for name, tasks in task_sets.items():
        sample = spread(list(tasks), per_set)
        lengths = {task.id: engine.prompt_length(task) for task in sample}
        over = {k: v for k, v in lengths.items() if v + s.max_action_tokens > s.max_context}
        if not over:
            continue
        what = prompt_overflow(max(over, key=over.get), len(over), len(sample), max(over.values()), s, engine.mode,
                               cfg.data.env_id)
        if len(over) == len(sample):
            raise ValueError(f"{name} tasks: {what}")
        warnings.warn(f"{name} tasks: {what}; those episodes end as truncated", stacklevel=2)
