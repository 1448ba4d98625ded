"""verl adapter, rollout side: a ToolChainEnv episode inside verl's multi-turn rollout (verl 0.9 agent loops).

Register it with verl through an agent-loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``,
see ``examples/verl/agent_loop.yaml``)::

    - name: rods_env
      _target_: rods_gym.integrations.verl_agent_loop.RODSAgentLoop

Rows whose ``agent_name`` is ``rods_env`` (every row ``rods tasks --to-parquet`` writes, and every row of
:class:`~rods_gym.integrations.verl.RODSTaskDataset`) then run here: the row's task (``extra_info.rods_task``)
is reset in its env (``extra_info.env_id``, a chat view); the opening messages and the task's tools (their
JSON Schemas) are rendered by verl's Continuous Token builder (``ct_build_initial_tokens``); each turn the
policy's server generates one action, which is decoded and stepped in the env; only the env's new messages
(tool results, error observations, the scripted user's replies) are merged in (``ct_merge_context_msg``,
response mask 0), the generated ids stay as generated (mask 1). The episode's return (its final progress)
is the trajectory's ``reward_score``, which verl turns into ``rm_scores`` / ``token_level_scores``; the task
id, success and progress go to ``extra_fields`` (``rods_task_id``, ``rods_success``, ``rods_progress``).

Written against verl 0.9.1's ``AgentLoopBase`` and tested on CPU with a scripted server in place of the
LLM server (``tests/test_integration_verl.py``); not run inside a verl training job here (no GPU).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from rods_gym.task import TaskSpec

from .episodes import TextEpisode, make_text_env
from .rows import AGENT_NAME, DEFAULT_ENV_ID

DEFAULT_MAX_TURNS = 16


@register(AGENT_NAME)
class RODSAgentLoop(AgentLoopBase):
    """One ToolChainEnv episode per trajectory. Turn limit: ``rollout.multi_turn.max_assistant_turns`` (else 16),
    and the env's own step limit; length limits: ``rollout.prompt_length`` / ``rollout.response_length``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's global tool list: a rods task brings its own tools
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.get("multi_turn", {}) or {}
        self.max_turns = int(multi_turn.get("max_assistant_turns") or DEFAULT_MAX_TURNS)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {}
        if not info.get("rods_task"):
            raise ValueError(f"row {kwargs.get('index')!r} has no extra_info.rods_task: agent_name={AGENT_NAME} runs "
                             "rows written by rods tasks --to-parquet (or served by RODSTaskDataset)")
        task = TaskSpec.from_json(info["rods_task"])
        env = make_text_env(str(info.get("env_id") or DEFAULT_ENV_ID))
        try:
            return await self._episode(TextEpisode(env), task, sampling_params)
        finally:
            env.close()

    async def _episode(self, ep: TextEpisode, task: TaskSpec, sampling_params: dict[str, Any]) -> AgentLoopOutput:
        messages, tools = ep.start(task)
        metrics: dict[str, Any] = {}
        runtime_ids = await self.ct_build_initial_tokens(messages, tools=tools)
        response_mask: list[int] = []
        logprobs: list[float] = []
        request_id = uuid4().hex
        turns = 0
        while True:
            with simple_timer("generate_sequences", metrics):
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=runtime_ids,
                                                         sampling_params=sampling_params)
            turns += 1
            merged, response_mask, merged_lps = await self.ct_merge_assistant_token(
                runtime_ids, out.token_ids, response_mask, logprobs if (logprobs or out.log_probs) else None,
                assistant_logprobs=out.log_probs or None)
            runtime_ids = merged.token_ids
            logprobs = list(merged_lps or [])
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True).strip()
            with simple_timer("tool_calls", metrics):
                step = ep.act(text)
            if step.done or turns >= self.max_turns or len(response_mask) >= self.response_length:
                break
            merged, mask, merged_lps = await self.ct_merge_context_msg(
                ep.messages[: len(ep.messages) - step.n_new], ep.messages, runtime_ids, response_mask,
                logprobs or None, tools=tools)
            if len(mask) >= self.response_length:  # the env's reply would not fit: the episode ends here
                break
            runtime_ids, response_mask = merged.token_ids, mask
            logprobs = list(merged_lps or [])
        n = len(response_mask)
        return AgentLoopOutput(
            prompt_ids=runtime_ids[: len(runtime_ids) - n],
            response_ids=runtime_ids[len(runtime_ids) - n:][: self.response_length],
            response_mask=response_mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=float(ep.ret),
            num_turns=2 * turns + 1,
            metrics=metrics,
            extra_fields={"rods_task_id": task.id, "rods_success": bool(ep.success), "rods_progress": float(ep.progress)},
        )
