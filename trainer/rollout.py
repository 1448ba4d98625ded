"""Batched multi-turn episodes: many environments at once, one generation batch per turn.

Every turn, the live episodes' token streams go through one batched generation call (a
``generation.DecodeSession``, which prefills a prompt shared by several episodes once); each
generated action is decoded to text and stepped in its environment; the environment's new
messages are tokenized (only them, see ``transcript.ChatCodec``) and appended as context.
The ``repeats`` episodes of a task whose first conversations are equal share one rendering
and tokenizing of it. Episodes end at different turns (terminated, truncated by the env's
step limit, by ``max_turns``, or because the context would exceed ``max_context``). The
return of an episode is the sum of its rewards (its final progress with the default reward).
Episodes can also start from a ``Branch``: a recorded prefix of actions replayed as context (e.g.
the state right after a rejected call, ``branch_after_first_rejection``), so a group of episodes
shares its history up to that point.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import gymnasium as gym
import torch

from rods_gym.task import TaskSpec

from .generation import DecodeSession
from .policy import Policy
from .transcript import ChatCodec, Messages, Transcript

MODES = ("compact", "chat")
Tools = list[dict[str, Any]] | None


def conversation_start(env: gym.Env, obs: str) -> tuple[Messages, Tools]:
    """The conversation after ``reset``: the env's chat messages and tools, or (compact) the observation."""
    if env.unwrapped.mode == "chat":
        return list(env.unwrapped.messages), list(env.unwrapped.tools)
    return [{"role": "user", "content": obs}], None


def conversation_step(env: gym.Env, messages: Messages, action: str, obs: str, info: Mapping[str, Any]) -> tuple[Messages, int]:
    """The conversation after a step, and how many messages the environment added after the action."""
    if env.unwrapped.mode == "chat":
        return list(env.unwrapped.messages), len(info["new_messages"])
    return messages + [{"role": "assistant", "content": action}, {"role": "user", "content": obs}], 1


@dataclass
class Trajectory:
    task: TaskSpec
    task_index: int  # position of the task in the batch given to RolloutEngine.run
    transcript: Transcript
    progress: float = 0.0
    success: bool = False
    truncated: bool = False
    done: bool = False
    env_options: dict[str, Any] = field(default_factory=dict)
    rewards: list[float] = field(default_factory=list)  # the env's reward for each action, in order
    action_spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each action's ids
    rejected: list[bool] = field(default_factory=list)  # whether the env rejected each action (error class != none)
    effects: list[str] = field(default_factory=list)  # what each action did (the env's info["effect"], "" if none)
    reset_seed: int = 0  # the seed the episode's environment was reset with
    prefix: "Branch | None" = None  # the replayed start of a branch episode (its actions are context)

    @property
    def errors(self) -> int:
        """Actions the environment rejected (error class != none)."""
        return sum(self.rejected)

    @property
    def turns(self) -> int:
        """Agent actions taken."""
        return len(self.rewards)

    @property
    def ret(self) -> float:
        """The episode's return: the sum of its actions' rewards (its final progress when no penalty is set)."""
        return float(sum(self.rewards))

    @property
    def n_generated(self) -> int:
        return sum(self.transcript.action_mask)


@dataclass(frozen=True)
class Branch:
    """A state to restart episodes from: a task and the generated ids of the actions that led there.

    Episodes run from a branch (``RolloutEngine.run(..., branches=...)``) replay those actions in a
    fresh environment, their ids entering the transcript as context (no loss, no log-probs), then
    continue with the policy. A group of such episodes shares its whole history, so their returns
    differ only by what the policy did after the branch point (how ARPO and TreeRL branch rollouts).
    """

    task: TaskSpec
    env_options: Mapping[str, Any]
    actions: tuple[tuple[int, ...], ...]  # the prefix actions' ids, each as generated (stop token included)
    ids: tuple[int, ...]  # the transcript's ids up to the branch point (checked when replayed)
    # the reset seed of the episode it was taken from: its episodes reset with it, since an environment
    # may draw from it (e.g. the augmented twin's rewording); None: each episode's own seed
    seed: int | None = None


def branch_before_action(tr: "Trajectory", n: int) -> Branch:
    """The state of ``tr`` right before its action ``n``: its first ``n`` actions replayed, in the
    episode's env options and reset seed."""
    ids = tr.transcript.ids
    actions = tuple(tuple(ids[a:b]) for a, b in tr.action_spans[:n])
    return Branch(tr.task, dict(tr.env_options), actions, tuple(ids[: tr.action_spans[n][0]]), tr.reset_seed)


def branch_after_first_rejection(tr: "Trajectory", budget: int) -> Branch | None:
    """The state right after ``tr``'s first rejected action (its error observation read), when the
    episode went on from there and at least one of ``budget`` actions is left; else None. Branch
    episodes themselves are not branched again."""
    if tr.prefix is not None or True not in tr.rejected:
        return None
    k = tr.rejected.index(True)
    if k + 1 >= min(len(tr.action_spans), budget):  # the rejection was the last action taken, or nothing is left
        return None
    return branch_before_action(tr, k + 1)


MISSES = ("rejected", "none")  # info["effect"] of an action that did nothing the task needs


def misses(tr: "Trajectory") -> list[bool]:
    """Per action of ``tr``, whether it did nothing the task needs (``first_miss`` says what counts)."""
    if len(tr.effects) == len(tr.rewards) and all(tr.effects):
        return [e in MISSES for e in tr.effects]
    return [r <= 0.0 for r in tr.rewards]


def first_miss(tr: "Trajectory") -> int | None:
    """Index of ``tr``'s first action that did nothing the task needs: rejected, or accepted without
    effect (a call with wrong arguments, an ask with nothing to add, a final reply without the answer;
    the env's ``info["effect"]``). Asks that reveal facts, replies that unlock tools or open the next
    turn are not misses, though they earn no reward. Without effects recorded: the first action with
    reward <= 0."""
    return next((t for t, missed in enumerate(misses(tr)) if missed), None)


def branch_before_first_miss(tr: "Trajectory") -> Branch | None:
    """The state before ``tr``'s first miss (``first_miss``), when the episode failed; else None (also
    for a failed episode without a miss: out of turns or context). From there a group of episodes
    retries exactly the decision the episode got wrong (the first action of a failed episode can be
    it: the branch then replays nothing). Branch episodes are not branched again."""
    if tr.prefix is not None or tr.success:
        return None
    k = first_miss(tr)
    return None if k is None else branch_before_action(tr, k)


@dataclass
class RolloutStats:
    gen_time: float = 0.0
    env_time: float = 0.0
    gen_tokens: int = 0
    context_tokens: int = 0

    def add(self, other: "RolloutStats") -> None:
        """Count ``other``'s time and tokens into these."""
        self.gen_time += other.gen_time
        self.env_time += other.env_time
        self.gen_tokens += other.gen_tokens
        self.context_tokens += other.context_tokens


@dataclass(frozen=True)
class RolloutSettings:
    max_action_tokens: int = 24
    max_turns: int = 12
    max_context: int = 1024
    temperature: float = 1.0
    turn_slack: int | None = None  # per-task action budget: the oracle's action count + slack (None: off)


def oracle_actions(task: TaskSpec) -> int:
    """Actions the oracle needs at most: every call, a reply per user turn, an ask per turn with
    withheld facts, an extra reply per turn with a locked tool."""
    return (len(task.calls) + len(task.turns) + sum(1 for t in task.turns if t.withheld)
            + sum(1 for t in task.turns if t.locked))


def prompt_overflow(task_id: str, over: int, total: int, longest: int, settings: RolloutSettings, mode: str,
                    env_id: str) -> str:
    """What to say when ``over`` of ``total`` first prompts leave no room for an action."""
    shorter = " or use a shorter view (the compact one)" if mode != "compact" else ""
    return (f"the first prompt of {over} of {total} episodes (up to {longest} tokens, task {task_id!r} among them) "
            f"plus rollout.max_action_tokens={settings.max_action_tokens} exceeds rollout.max_context="
            f"{settings.max_context} in {env_id!r}, so no action can be generated: raise rollout.max_context (up to "
            f"the model's positions){shorter}")


class RolloutEngine:
    """Holds a pool of environments of ``env_id`` and runs batches of episodes with a policy."""

    def __init__(self, policy: Policy, env_id: str, settings: RolloutSettings,
                 env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.policy = policy
        self.env_id = env_id
        self.settings = settings
        self.env_kwargs = dict(env_kwargs or {})
        self.codec = ChatCodec(policy)
        self.envs: list[gym.Env] = []
        self._warned_long_prompts = False
        probe = self._env(0)
        self.mode = probe.unwrapped.mode
        if self.mode not in MODES:
            raise ValueError(f"env {env_id!r} uses the {self.mode!r} view; LLM policies need one of {MODES}")

    def _env(self, i: int) -> gym.Env:
        while len(self.envs) <= i:
            self.envs.append(gym.make(self.env_id, **self.env_kwargs))
        return self.envs[i]

    def prompt_length(self, task: TaskSpec) -> int:
        """Tokens of ``task``'s first prompt (reset with seed 0), as an episode starts from it."""
        env = self._env(0)
        obs, _ = env.reset(seed=0, options={"task": task})
        return len(self.codec.start(*conversation_start(env, obs)))

    def _warn_long_prompts(self, trajs: Sequence[Trajectory]) -> None:
        """An episode whose first prompt leaves no room for an action ends untouched, counted as truncated:
        said once per engine (a setup check, ``preflight.check_prompts_fit``, refuses task sets where none fit)."""
        if self._warned_long_prompts:
            return
        s = self.settings
        over = [tr for tr in trajs if len(tr.transcript) + s.max_action_tokens > s.max_context]
        if not over:
            return
        self._warned_long_prompts = True
        longest = max(len(tr.transcript) for tr in over)
        what = prompt_overflow(over[0].task.id, len(over), len(trajs), longest, s, self.mode, self.env_id)
        warnings.warn(f"{what}; they end as truncated", stacklevel=3)

    def run(self, tasks: Sequence[TaskSpec], repeats: int = 1, *, generator: torch.Generator | None = None,
            greedy: bool = False, seed: int = 0, env_options: Sequence[Mapping[str, Any]] | None = None,
            model: Any = None, branches: Sequence[Branch | None] | None = None) -> tuple[list[Trajectory], RolloutStats]:
        """``repeats`` episodes of every task (task-major order: task 0's episodes first). ``branches``
        (aligned with ``tasks``): where a task's episodes start from a replayed prefix (``Branch``)."""
        s = self.settings
        model = model if model is not None else self.policy.model
        if branches is not None:
            if len(branches) != len(tasks):
                raise ValueError(f"branches: {len(branches)} given for {len(tasks)} tasks (one per task, or None)")
            wrong = [ti for ti, b in enumerate(branches) if b is not None and b.task != tasks[ti]]
            if wrong:
                raise ValueError(f"branches: the branch of task position(s) {wrong} was taken from another task")
        stats = RolloutStats()
        t0 = time.perf_counter()
        trajs: list[Trajectory] = []
        convs: list[tuple[Messages, Tools]] = []
        for ti, task in enumerate(tasks):
            branch = branches[ti] if branches is not None else None
            if env_options is not None:
                opts = dict(env_options[ti])
            else:  # a branch replays in the env options of the episode it was taken from
                opts = dict(branch.env_options) if branch is not None else {}
            first: tuple[Messages, Tools, Transcript] | None = None  # the group's rendered, tokenized prompt
            for _ in range(repeats):
                i = len(trajs)
                env = self._env(i)
                reset_seed = branch.seed if branch is not None and branch.seed is not None else seed + i
                obs, info = env.reset(seed=reset_seed, options={"task": task, **opts})
                messages, tools = conversation_start(env, obs)
                if first is None or (messages, tools) != (first[0], first[1]):
                    first = (messages, tools, self.codec.start(messages, tools))
                tr = Trajectory(task, ti, first[2].copy(), progress=info["progress"], env_options=opts,
                                reset_seed=reset_seed)
                if branch is not None:
                    messages = self._replay(env, tr, branch, messages, tools)
                trajs.append(tr)
                convs.append((messages, tools))
        stats.env_time += time.perf_counter() - t0
        self._warn_long_prompts(trajs)

        was_training = model.training
        model.eval()
        session = DecodeSession(model, self.policy.pad_id, len(trajs))
        rows = list(range(len(trajs)))  # the trajectory of each session row
        new_ids = [list(tr.transcript.ids) for tr in trajs]  # ids each row has not fed yet
        limits = [self.action_budget(tr.task) - (len(tr.prefix.actions) if tr.prefix is not None else 0)
                  for tr in trajs]
        for _ in range(s.max_turns):
            fits = []
            for i in rows:
                tr = trajs[i]
                if len(tr.transcript) + s.max_action_tokens > s.max_context or tr.turns >= limits[i]:
                    tr.done = tr.truncated = True
                else:
                    fits.append(i)
            session.keep([rows.index(i) for i in fits])
            rows = fits
            if not rows:
                break
            t1 = time.perf_counter()
            session.extend([new_ids[i] for i in rows])
            gens = session.sample(stop_ids=self.policy.stop_ids, max_new_tokens=s.max_action_tokens,
                                  temperature=s.temperature, generator=generator, greedy=greedy)
            t2 = time.perf_counter()
            stats.gen_time += t2 - t1
            for i, g in zip(rows, gens):
                tr, env = trajs[i], self.envs[i]
                start = len(tr.transcript)
                tr.transcript.add_action(g.ids, g.logprobs)
                tr.action_spans.append((start, len(tr.transcript)))
                stats.gen_tokens += len(g.ids)
                text = self.codec.action_text(g.ids)
                obs, reward, terminated, truncated, info = env.step(text)
                tr.rewards.append(float(reward))
                tr.progress, tr.success = float(info["progress"]), bool(info["success"])
                tr.rejected.append(info["error"] != "none")
                tr.effects.append(str(info.get("effect", "")))
                if terminated or truncated:
                    tr.done, tr.truncated = True, bool(truncated and not terminated)
                    continue
                if tr.turns >= limits[i]:  # out of actions: the next observation would never be read
                    tr.done = tr.truncated = True
                    continue
                messages, tools = convs[i]
                messages, n_new = conversation_step(env, messages, text, obs, info)
                convs[i] = (messages, tools)
                before = len(tr.transcript)
                self.codec.continue_after_action(tr.transcript, messages, n_new, tools, self.codec.closes_turn(g.ids))
                new_ids[i] = tr.transcript.ids[before:]
            keep = [k for k, i in enumerate(rows) if not trajs[i].done]
            session.keep(keep)
            rows = [rows[k] for k in keep]
            stats.env_time += time.perf_counter() - t2
        for tr in trajs:
            if not tr.done:
                tr.done = tr.truncated = True
            tr.transcript.trim_context()
        if was_training:
            model.train()
        stats.context_tokens = sum(len(tr.transcript) for tr in trajs) - stats.gen_tokens
        return trajs, stats

    def action_budget(self, task: TaskSpec) -> int:
        """The actions an episode of ``task`` may take (``max_turns``, or the oracle's count + ``turn_slack``)."""
        s = self.settings
        return s.max_turns if s.turn_slack is None else min(s.max_turns, oracle_actions(task) + s.turn_slack)

    def _replay(self, env: gym.Env, tr: Trajectory, branch: Branch, messages: Messages, tools: Tools) -> Messages:
        """Step ``branch``'s actions in the freshly reset ``env``, their ids entering ``tr`` as context."""
        info: dict[str, Any] = {}
        for ids in branch.actions:
            text = self.codec.action_text(ids)
            tr.transcript.add_context(ids)
            obs, _, terminated, truncated, info = env.step(text)
            if terminated or truncated:
                raise ValueError(f"task {tr.task.id!r}: the branch's prefix ends the episode; a branch starts "
                                 "where the episode went on")
            messages, n_new = conversation_step(env, messages, text, obs, info)
            self.codec.continue_after_action(tr.transcript, messages, n_new, tools, self.codec.closes_turn(ids))
        if tuple(tr.transcript.ids) != branch.ids:
            raise ValueError(f"task {tr.task.id!r}: replaying the branch's {len(branch.actions)} actions gave other "
                             "tokens than the episode it was taken from (another environment, env options or "
                             "tokenizer?)")
        tr.progress, tr.prefix = float(info.get("progress", tr.progress)), branch
        return messages
