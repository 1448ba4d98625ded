"""TRL's ``GRPOTrainer`` on any ``rods/*`` text env, with a rods-gym curriculum (RODS by default) choosing
each step's tasks from the group rewards TRL computed. Install with ``pip install "rods-gym[trl]"``.

    from rods_gym.curricula import make_source
    from rods_gym.integrations.trl import TRLCurriculum

    curriculum = TRLCurriculum(make_source("rods", seeds, group_size=8), "rods/ToolChain-Chat-v0",
                               tasks_per_batch=4, group_size=8)
    args = GRPOConfig(num_generations=8, per_device_train_batch_size=32, shuffle_dataset=False, max_steps=100,
                      max_completion_length=512, generation_kwargs={"max_new_tokens": 96}, ...)
    trainer = GRPOTrainer(model, args=args, processing_class=tokenizer,
                          train_dataset=curriculum.dataset(args), reward_funcs=curriculum.reward_funcs,
                          rollout_func=curriculum.rollout, callbacks=[curriculum.callback()])
    trainer.train()

How it plugs in (read from trl 1.16's ``GRPOTrainer``):

- **Rows are curriculum slots.** ``dataset(args)`` is a ``datasets.Dataset`` of one row per prompt slot
  (:mod:`rods_gym.integrations.schedule`); TRL's ``RepeatSampler`` (``shuffle_dataset=False``) hands out
  ``generation_batch_size / num_generations`` consecutive slots per generation, each G times. A slot's
  task is decided when it is rolled out, by the curriculum, after every earlier group was observed.
- **Multi-turn rollouts through ``rollout_func``.** Each rollout is a ToolChainEnv episode of its slot's
  task: the env's messages rendered with the model's chat template and the task's tools (their JSON
  Schemas), generation by the trainer's own backend (``GRPOTrainer._generate_single_turn``: transformers
  or vLLM) one action at a time, each action stepped in the env, only the env's new messages tokenized
  and appended (``env_mask`` 0, so they carry no loss; the generated ids are kept as generated). TRL's
  other multi-turn hook, ``environment_factory``, exposes one fixed tool list per environment (the
  methods of its class, read when the trainer is built) and ends a rollout at the first reply without a
  tool call: a rods task offers its own tools (and RODS synthesizes tasks over other tools mid-run), and
  may go on after a reply (the scripted user's answer, the next user turn).
- **Reward**: :func:`rods_env_reward` returns each episode's return (the env's progress in [0, 1]).
- **Feedback**: :class:`RODSCallback` reads, after every optimizer step, the per-completion rewards TRL
  logged for the generation batch (``GRPOTrainer._logs``, gathered over processes, the rewards its
  advantages were computed from, weighted by ``reward_weights``) and hands each complete batch to the
  curriculum (``source.observe``): no extra episode. Every process observes the same gathered rewards,
  so their curricula stay identical.
- **Checkpoints**: the curriculum's state (source, RNG, pool, drawn batches) is the callback's state in
  TRL's checkpoints (``trainer_state.json``, ``stateful_callbacks``); ``trainer.train(resume_from_checkpoint=...)``
  restores it, so a resumed run serves the same tasks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from rods_gym.curricula import Rollout, SlotSchedule, TaskSource
from rods_gym.task import TaskSpec

from ..trainer.policy import wrap
from ..trainer.transcript import ChatCodec, Transcript
from .episodes import TextEpisode, make_text_env

SLOT_KEY = "rods_slot"  # in a prompt's message: the curriculum slot of the row
TASK_KEY = "rods_task"  # in a prompt's message: a fixed task (JSON), for evaluation rows
CALLBACK_STATE = "curriculum"


def slot_rows(first: int, n: int) -> list[dict[str, Any]]:
    return [{"prompt": [{"role": "user", "content": "", SLOT_KEY: first + i}]} for i in range(n)]


def generations_needed(max_steps: int, gradient_accumulation_steps: int, steps_per_generation: int,
                       num_iterations: int) -> int:
    """How many generation batches TRL rolls out in ``max_steps`` optimizer steps: one every
    ``steps_per_generation * num_iterations`` micro-steps, ``gradient_accumulation_steps`` micro-steps a step."""
    return math.ceil(max_steps * gradient_accumulation_steps / (steps_per_generation * num_iterations))


def rods_env_reward(completions: list[Any], rods_return: list[float], rods_success: list[bool] | None = None,
                    rods_task_id: list[str] | None = None, log_extra: Callable[[str, list], None] | None = None,
                    **_: Any) -> list[float]:
    """Each rollout's return in its ToolChainEnv episode (final progress in [0, 1] with the default reward).
    Logs the episode's task id and success beside TRL's completion table."""
    if log_extra is not None:
        if rods_task_id is not None:
            log_extra("rods_task_id", list(rods_task_id))
        if rods_success is not None:
            log_extra("rods_success", [bool(s) for s in rods_success])
    return [float(r) for r in rods_return]


def rods_success_reward(completions: list[Any], rods_success: list[bool], **_: Any) -> list[float]:
    """1.0 for an episode that solved its task, else 0.0 (add it to ``reward_funcs`` for a success bonus)."""
    return [float(bool(s)) for s in rods_success]


class TRLCurriculum:
    """A task source served to TRL's GRPOTrainer: slot dataset, multi-turn rollouts, reward, feedback.

    Args:
        source: the curriculum (``rods_gym.curricula.make_source("rods", seeds, group_size=G)`` or any TaskSource).
        env_id: a text view of a rods env (``rods/ToolChain-Chat-v0``; ``rods/ToolChain-Compact-v0`` for
            the embedded compact tokenizer). A source with its own ``env_id`` (the augmentation arm) wins.
        tasks_per_batch: distinct tasks per generation batch = TRL's ``generation_batch_size // num_generations``.
        group_size: G = TRL's ``num_generations``.
        max_turns: actions per episode at most (the env's own step limit also applies).
        env_kwargs: keyword arguments of ``gym.make``.
    """

    def __init__(self, source: TaskSource, env_id: str, *, tasks_per_batch: int, group_size: int, max_turns: int = 8,
                 env_kwargs: Mapping[str, Any] | None = None) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.schedule = SlotSchedule(source, tasks_per_batch, group_size)
        self.env_id = getattr(source, "env_id", None) or env_id
        self.env_kwargs = dict(getattr(source, "env_kwargs", None) or env_kwargs or {})
        make_text_env(self.env_id, self.env_kwargs).close()  # a bad env id fails here, not at the first step
        self.max_turns = int(max_turns)
        self.reward_funcs: list[Callable[..., list[float]]] = [rods_env_reward]
        self.trainer: Any = None  # the GRPOTrainer, known from its first rollout_func call
        self._envs: list[gym.Env] = []
        self._codec: ChatCodec | None = None
        self.rollout_calls = 0

    # -- data ---------------------------------------------------------------------------
    def dataset(self, args: Any) -> Dataset:
        """The slot rows for a run with these ``GRPOConfig`` ``args`` (its ``max_steps`` must be set)."""
        self.check_args(args)
        n = generations_needed(args.max_steps, args.gradient_accumulation_steps, args.steps_per_generation,
                               args.num_iterations)
        return Dataset.from_list(slot_rows(0, n * self.schedule.tasks_per_batch))

    @staticmethod
    def eval_dataset(tasks: Sequence[TaskSpec]) -> Dataset:
        """Rows that each run one fixed task (for ``eval_dataset``; the curriculum does not see them)."""
        return Dataset.from_list([{"prompt": [{"role": "user", "content": "", TASK_KEY: t.to_json()}]} for t in tasks])

    def check_args(self, args: Any) -> None:
        """A ``ValueError`` naming each ``GRPOConfig`` field that disagrees with the curriculum."""
        s = self.schedule
        problems = []
        if getattr(args, "max_steps", 0) is None or args.max_steps <= 0:
            problems.append("max_steps must be set (> 0): the slot dataset covers exactly the steps of the run")
        if args.num_generations != s.group_size:
            problems.append(f"num_generations={args.num_generations} but the curriculum's G is {s.group_size}")
        per_batch = args.generation_batch_size // args.num_generations
        if per_batch != s.tasks_per_batch:
            problems.append(f"generation_batch_size // num_generations = {per_batch} prompts per generation, but the "
                            f"curriculum draws tasks_per_batch={s.tasks_per_batch}")
        if args.shuffle_dataset:
            problems.append("shuffle_dataset must be False: the curriculum, not a shuffle, orders the slots")
        if getattr(args, "restore_callback_states_from_checkpoint", False):
            problems.append("restore_callback_states_from_checkpoint must stay False: RODSCallback restores the "
                            "curriculum itself (transformers would rebuild the callback without it)")
        if problems:
            raise ValueError("GRPOConfig does not fit the curriculum: " + "; ".join(problems))

    # -- rollouts -----------------------------------------------------------------------
    def task_of(self, prompt: Sequence[Mapping[str, Any]]) -> tuple[TaskSpec, int | None]:
        """The task a prompt row stands for, and its slot (None for a fixed evaluation task)."""
        marks = [m for m in prompt if isinstance(m, Mapping) and (m.get(SLOT_KEY) is not None or m.get(TASK_KEY))]
        if not marks:
            raise ValueError(f"prompt {list(prompt)!r} is not a rods-gym row: build the dataset with "
                             f"TRLCurriculum.dataset(args) (or eval_dataset(tasks)); its messages carry {SLOT_KEY!r}")
        mark = marks[-1]
        if mark.get(SLOT_KEY) is not None:
            slot = int(mark[SLOT_KEY])
            return self.schedule.task(slot), slot
        return TaskSpec.from_json(mark[TASK_KEY]), None

    def _env(self, i: int) -> gym.Env:
        while len(self._envs) <= i:
            self._envs.append(make_text_env(self.env_id, self.env_kwargs))
        return self._envs[i]

    def _codec_for(self, trainer: Any) -> ChatCodec:
        if self._codec is None:
            model = trainer.accelerator.unwrap_model(trainer.model)
            name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
            self._codec = ChatCodec(wrap(model, trainer.processing_class, name))
        return self._codec

    def rollout(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, list]:
        """TRL's ``rollout_func``: one multi-turn episode per prompt (the G copies of a slot are its group)."""
        generate = getattr(trainer, "_generate_single_turn", None)
        if not callable(generate):
            raise RuntimeError("this GRPOTrainer has no _generate_single_turn(); rods_gym.integrations.trl needs "
                               "trl>=1.16,<2")
        self.trainer = trainer
        self.rollout_calls += 1
        codec = self._codec_for(trainer)
        budget = int(trainer.max_completion_length)
        config = trainer.accelerator.unwrap_model(trainer.model).config
        max_context = int(getattr(config.get_text_config(), "max_position_embeddings", 0) or 0)
        resolved = [self.task_of(p) for p in prompts]
        episodes, transcripts, starts, turns = [], [], [], []
        for i, (task, _) in enumerate(resolved):
            ep = TextEpisode(self._env(i))
            messages, tools = ep.start(task, self.schedule.env_options(task))
            tr = codec.start(messages, tools)
            episodes.append(ep)
            transcripts.append(tr)
            starts.append(len(tr))
            turns.append(0)
        live = list(range(len(prompts)))
        with_logprobs = False
        while live:
            outs, logprobs = generate([transcripts[i].ids for i in live], None, {}, 1)
            with_logprobs = with_logprobs or logprobs is not None
            still = []
            for k, i in enumerate(live):
                tr, ep = transcripts[i], episodes[i]
                room = budget - (len(tr) - starts[i])
                ids = list(outs[k])[:room]
                tr.add_action(ids, None if logprobs is None else list(logprobs[k])[:room])
                turns[i] += 1
                step = ep.act(codec.action_text(ids))
                if step.done:
                    continue
                if turns[i] >= self.max_turns or len(tr) - starts[i] >= budget:
                    ep.stop()
                    continue
                codec.continue_after_action(tr, ep.messages, step.n_new, ep.tools, codec.closes_turn(ids))
                if len(tr) - starts[i] >= budget or (max_context and len(tr) >= max_context):
                    ep.stop()  # no room left for another action
                    continue
                still.append(i)
            live = still
        return self._outputs(resolved, episodes, transcripts, starts, with_logprobs)

    @staticmethod
    def _outputs(resolved: Sequence[tuple[TaskSpec, int | None]], episodes: Sequence[TextEpisode],
                 transcripts: Sequence[Transcript], starts: Sequence[int], with_logprobs: bool) -> dict[str, list]:
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "rods_return",
                                                "rods_success", "rods_task_id", "rods_progress")}
        for (task, _), ep, tr, start in zip(resolved, episodes, transcripts, starts, strict=True):
            tr.trim_context()  # the env's last messages after the final action carry no loss
            out["prompt_ids"].append(tr.ids[:start])
            out["completion_ids"].append(tr.ids[start:])
            out["logprobs"].append(tr.logprobs[start:])
            out["env_mask"].append(tr.action_mask[start:])
            out["rods_return"].append(ep.ret)
            out["rods_success"].append(ep.success)
            out["rods_task_id"].append(task.id)
            out["rods_progress"].append(ep.progress)
        if not with_logprobs:  # transformers generation keeps no sampling log-probs; TRL recomputes them
            out["logprobs"] = None  # type: ignore[assignment]
        return out

    # -- feedback -----------------------------------------------------------------------
    def observe_logged(self, trainer: Any) -> list[int]:
        """Feed the batches complete in the trainer's logged rewards to the curriculum (each batch once)."""
        logs = getattr(trainer, "_logs", None)
        if not isinstance(logs, Mapping) or "prompt" not in logs or "rewards" not in logs:
            raise RuntimeError("this GRPOTrainer keeps no _logs of its per-completion rewards; "
                               "rods_gym.integrations.trl needs trl>=1.16,<2")
        prompts = list(logs["prompt"])
        weights = [float(w) for w in trainer.reward_weights.tolist()]
        columns = [list(logs["rewards"][name]) for name in trainer.reward_func_names]
        successes = list(logs.get("extra", {}).get("rods_success", []))
        if any(len(c) != len(prompts) for c in columns):
            raise RuntimeError("the trainer's logged rewards and prompts differ in length")
        by_batch: dict[int, list[Rollout]] = {}
        for j, prompt in enumerate(prompts):
            slot = next((m.get(SLOT_KEY) for m in prompt if isinstance(m, Mapping) and m.get(SLOT_KEY) is not None),
                        None)
            if slot is None:
                continue  # an evaluation row
            batch, _ = self.schedule.batch_of(int(slot))
            if self.schedule.is_observed(batch):
                continue  # logged at an earlier step (steps_per_generation > 1 reuses one generation)
            values = [w * c[j] for w, c in zip(weights, columns) if not math.isnan(c[j])]
            ok = bool(successes[j]) if len(successes) == len(prompts) else False
            by_batch.setdefault(batch, []).append(Rollout(int(slot), float(sum(values)), ok))
        expected = self.schedule.tasks_per_batch * self.schedule.group_size
        done = []
        for batch in sorted(by_batch):
            if len(by_batch[batch]) == expected:
                done += self.schedule.record(by_batch[batch])
        return done

    def callback(self) -> "RODSCallback":
        return RODSCallback(self)

    def state_dict(self) -> dict[str, Any]:
        return self.schedule.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.schedule.load_state_dict(state)


class RODSCallback(TrainerCallback, ExportableState):
    """Feeds TRL's logged group rewards to the curriculum after every optimizer step, logs its telemetry under
    ``curriculum/``, and keeps its state in TRL's checkpoints (``stateful_callbacks`` of trainer_state.json)."""

    def __init__(self, curriculum: TRLCurriculum) -> None:
        if not isinstance(curriculum, TRLCurriculum):
            raise TypeError(f"RODSCallback needs the TRLCurriculum it feeds, got {type(curriculum).__name__}")
        self.curriculum = curriculum

    def state(self) -> dict[str, Any]:
        return {"args": {}, "attributes": {CALLBACK_STATE: self.curriculum.state_dict()}}

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.curriculum.check_args(args)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.curriculum.check_args(args)
        saved = (state.stateful_callbacks or {}).get(type(self).__name__)
        if state.global_step > 0:  # resumed: trainer_state.json of the checkpoint is loaded by now
            if not isinstance(saved, Mapping) or CALLBACK_STATE not in saved.get("attributes", {}):
                raise ValueError("the checkpoint resumed from holds no curriculum state (stateful_callbacks."
                                 f"{type(self).__name__}); it was not saved by a run with RODSCallback")
            self.curriculum.load_state_dict(json.loads(json.dumps(saved["attributes"][CALLBACK_STATE])))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.curriculum.trainer
        if trainer is None:
            raise RuntimeError("RODSCallback: no rollout ran before this step; pass rollout_func=curriculum.rollout "
                               "to the GRPOTrainer")
        if self.curriculum.observe_logged(trainer):
            metrics = getattr(trainer, "_metrics", {}).get("train")
            if metrics is not None:  # averaged into the next log line by GRPOTrainer.log
                for key, value in self.curriculum.schedule.telemetry().items():
                    metrics[f"curriculum/{key}"].append(float(value))
