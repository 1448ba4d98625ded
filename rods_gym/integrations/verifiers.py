"""Every ``rods/*`` chat env as a verifiers environment (verifiers 0.4, the ``verifiers.v1`` stack): a taskset of a
split's tasks, an env whose ``run`` plays the rods env host-side as the model's user and tools, and an in-process
harness that calls the model with the task's tools. Install with ``pip install "rods-gym[verifiers]"``.

    from rods_gym.integrations.verifiers import load_environment
    env = load_environment(env_id="rods/ToolChain-Chat-v0", split="dev")
    async with env.serving():
        episode = await env.run_slot(RunSlot(next(iter(env.taskset))), vf.ModelContext(model=..., client=...))
    episode.traces[0].rewards     # {"progress": ...}; episode.traces[0].metrics["success"]

How it maps (read from verifiers 0.4.0's ``Env``, ``Taskset``, ``Harness``, ``Interaction`` and its own OpenEnv and
TextArena tasksets, which play their engines host-side the same way):

- **Taskset** (:class:`RodsTaskset`): one task per task of ``split`` (``train``/``dev``/``test``/``ood`` of the suite;
  ``train``/``test``/``all`` of BFCL), its prompt the task's first request, its tools the task's JSON Schemas, the
  task itself in the data (so a trace replays it). ``curriculum="fixed"`` streams the split's tasks through the same
  ``FixedSeeds`` arm every host uses (epochs, reshuffled by ``seed``), an infinite taskset bounded by the caller.
- **Env** (:class:`RodsEnv`): ``run`` opens the agent's interaction and steps a rods env: each tool call of the
  model's reply is one env action (its result goes back as a tool message), a reply without tool calls is the
  chat view's text to the user (the scripted user's answer or next request comes back as the next user turn);
  the exchange ends when the env's episode does. The trace gets the reward ``progress`` (the episode's return,
  progress in [0, 1]) and the metric ``success``.
- **Harness** (:class:`RodsHarness`): verifiers' own chat harness (``null``) runs as a PEP 723 script that ``uv``
  installs at run time; this one runs in-process and makes each segment's one model call through the
  interception endpoint (so the trace records it), with the task's tools.
- **Curricula**: verifiers' taskset is a loader (``load()``, possibly an infinite generator) that receives nothing
  back: the group rewards go to the trainer (prime-rl), which picks the tasks. So no curriculum that needs
  feedback (RODS, replay, DAPO) can drive it from here; ``fixed`` is the one offered.
- **Plugin id**: verifiers imports a taskset, harness and env by a top-level module name
  (``--env.taskset.id NAME``); importing this module registers it under :data:`PLUGIN_ID`.
  BFCL's missing-function tasks reveal a function mid-episode; the model is offered the tools of the task's
  start (it can still call the revealed function by name).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

from rods_gym.task import TaskSpec

from .tool_episode import USER_TOOL, ToolEpisode

PLUGIN_ID = "rods_gym_verifiers"
# verifiers imports a taskset, its harness and its env by top-level module name: this module is that plugin
sys.modules.setdefault(PLUGIN_ID, sys.modules[__name__])
__all__ = ["RodsEnv", "RodsEnvConfig", "RodsHarness", "RodsHarnessConfig", "RodsTask", "RodsTaskData",
           "RodsTaskset", "RodsTasksetConfig", "load_environment"]
DEFAULT_ENV_ID = "rods/ToolChain-Chat-v0"
SYSTEM_PROMPT = ("You are an assistant that completes the user's requests with the tools provided, one tool call "
                 "at a time. To ask the user for missing information, write a question ending with '?'. When a "
                 "request is done (or cannot be done with your tools), reply in plain text and include any value "
                 "the user asked for.")
CURRICULA = ("fixed",)


def is_bfcl(env_id: str) -> bool:
    return env_id.startswith("rods/BFCL")


def split_tasks(env_id: str, split: str, env_kwargs: Mapping[str, Any]) -> list[tuple[str, str, list[dict], dict]]:
    """(id, first request, tool schemas, task data) of every task of ``split``, without resetting an env."""
    if is_bfcl(env_id):
        from rods_gym.bfcl.data import short_schema, task_docs, tool_schema
        from rods_gym.bfcl.env import select_tasks

        short = env_kwargs.get("tool_docs", "full") == "short" or env_id.endswith("Short-v0")
        return [(t.id, t.user_text(0), [short_schema(d["name"]) if short else tool_schema(d) for d in task_docs(t, 0)],
                 {"bfcl_id": t.id}) for t in select_tasks(str(env_kwargs.get("category", "all")), split)]
    from rods_gym import default_suite, load_split

    suite = default_suite()
    return [(t.id, t.turns[0].message, [suite.public_schemas[n] for n in t.tools], t.to_dict())
            for t in load_split(split)]


class RodsTaskData(vf.TaskData):
    env_id: str = DEFAULT_ENV_ID
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The task's tools at its start (chat-template schemas), as offered to the model."""
    task: dict[str, Any] = Field(default_factory=dict)
    """The task: ``TaskSpec.to_dict()`` for the suite, ``{"bfcl_id": id}`` for BFCL."""


class RodsTask(vf.Task[RodsTaskData, vf.State, vf.TaskConfig]):
    @property
    def key(self) -> str:
        return f"{self.data.env_id}:{self.data.id}"


class RodsTasksetConfig(vf.TasksetConfig):
    env_id: str = DEFAULT_ENV_ID
    split: str = "train"
    curriculum: str = "fixed"
    seed: int = 0
    stream: bool = False
    """False: the split's tasks once, in order; True: the curriculum's stream of batches, forever."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)


class RodsTaskset(vf.Taskset[RodsTask, RodsTasksetConfig]):
    def __init__(self, config: RodsTasksetConfig) -> None:
        super().__init__(config)
        if config.curriculum not in CURRICULA:
            raise ValueError(f"curriculum {config.curriculum!r}: verifiers' taskset gets no group results back (the "
                             f"trainer picks the tasks), so only {CURRICULA} can serve it; RODS runs through TRL, "
                             "verl, OpenEnv or rods train")
        self.INFINITE = bool(config.stream)

    def _task(self, row: tuple[str, str, list[dict], dict]) -> RodsTask:
        task_id, prompt, tools, task = row
        c = self.config
        return RodsTask(RodsTaskData(id=task_id, name=task_id, prompt=prompt, system_prompt=SYSTEM_PROMPT,
                                     env_id=c.env_id, env_kwargs=dict(c.env_kwargs), tools=tools, task=task), c.task)

    def load(self) -> Iterator[RodsTask]:
        c = self.config
        rows = split_tasks(c.env_id, c.split, c.env_kwargs)
        if not c.stream:
            yield from (self._task(r) for r in rows)
            return
        from rods_gym.curricula import make_source

        by_id = {r[0]: r for r in rows}
        if is_bfcl(c.env_id):
            from rods_gym.bfcl.data import tasks_by_id
            from rods_gym.bfcl.taskmodel import to_taskspec

            seeds = [to_taskspec(tasks_by_id()[r[0]]) for r in rows]
        else:
            seeds = [TaskSpec.from_dict(r[3]) for r in rows]
        source = make_source(c.curriculum, seeds, seed=c.seed, group_size=2, env_id=c.env_id)
        for batch in itertools.count():
            for task in source.next_batch(batch, len(rows)):
                yield self._task(by_id[task.id])


class RodsHarnessConfig(vf.HarnessConfig):
    id: str = PLUGIN_ID


class RodsHarness(vf.Harness[RodsHarnessConfig]):
    """One model call per segment, in-process, through the interception endpoint, with the task's tools."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        tools = list(getattr(data, "tools", []) or [])
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            await client.chat.completions.create(model=ctx.model, messages=messages, tools=tools or None)
        return ProgramResult(exit_code=0, stdout="", stderr="")


class RodsEnvConfig(vf.EnvConfig):
    # the harness: the taskset's own (RodsHarness); the runtime: this machine (no container: the harness runs no code)
    agent: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())


class RodsEnv(vf.Env[RodsEnvConfig]):
    """The rods env plays the model's user and tools, host-side, one episode per run."""

    async def run(self, task: RodsTask, agents: vf.Agents) -> None:
        data = task.data
        episode = ToolEpisode(data.env_id, data.env_kwargs)
        try:
            target = data.task.get("bfcl_id") if is_bfcl(data.env_id) else TaskSpec.from_dict(data.task)
            episode.start(task_id=target) if isinstance(target, str) else episode.start(task=target)
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated and not episode.done:
                    reply = next((m for m in reversed(segment.messages) if isinstance(m, vf.AssistantMessage)), None)
                    calls = (reply.tool_calls or []) if reply is not None else []
                    if not calls:  # text to the user: the chat view's reply or question
                        text = ((reply.content if reply is not None else "") or "").strip() or "(no reply)"
                        result = episode.call(USER_TOOL, {"message": text})
                        if episode.done:
                            break
                        segment = await interaction.turn(result.text)
                        continue
                    answers = []
                    for call in calls:
                        result = episode.call(call.name, self._arguments(call.arguments))
                        answers.append(vf.ToolMessage(tool_call_id=call.id, name=call.name, content=result.text))
                        if episode.done:
                            break
                    if episode.done:
                        break
                    segment = await interaction.turn(answers)
            trace = interaction.trace
            trace.record_reward("progress", episode.ret)
            trace.record_metric("success", float(episode.success))
            trace.info["rods_task_id"] = episode.task_id
        finally:
            episode.close()

    @staticmethod
    def _arguments(raw: str) -> Any:
        """The model's raw argument text as JSON (the env judges what it is); unparsable text is kept as text."""
        try:
            return json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            return raw


def load_environment(env_id: str = DEFAULT_ENV_ID, split: str = "train", curriculum: str = "fixed", *, seed: int = 0,
                     stream: bool = False, max_turns: int | None = None, **env_kwargs: Any) -> RodsEnv:
    """A verifiers env over ``env_id``'s ``split`` (see the module doc); ``env_kwargs`` go to ``gym.make``."""
    ToolEpisode(env_id, env_kwargs).close()  # a bad env id fails here
    if split not in (("train", "test", "all") if is_bfcl(env_id) else ("train", "dev", "test", "ood")):
        raise ValueError(f"unknown split {split!r} for {env_id}")
    config = RodsEnvConfig(
        taskset={"id": PLUGIN_ID, "env_id": env_id, "split": split, "curriculum": curriculum, "seed": seed,
                 "stream": stream, "env_kwargs": env_kwargs},
        agent=vf.AgentConfig(runtime=SubprocessConfig(), max_turns=max_turns))
    return RodsEnv(config)
