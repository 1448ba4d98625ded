"""Adapters that let other trainers and servers use rods-gym envs and the curricula (RODS by default).

Nothing is imported here: each adapter needs its host's packages (an optional extra each). Every adapter takes its
curriculum from :mod:`rods_gym.curricula` by arm name.

- :mod:`.trl` (``pip install "rods-gym[trl]"``): TRL's ``GRPOTrainer`` through ``rollout_func``, a slot dataset
  whose tasks the curriculum picks, and a callback that feeds it the rewards TRL logged.
- :mod:`.trl_env` (the same extra): TRL's own tool loop (``environment_factory``), a class whose methods are the
  env's tools, fed by the same slot curriculum (docs/trl.md says when to use which).
- :mod:`.verl`, :mod:`.verl_agent_loop`, :mod:`.verl_trainer` (``pip install "rods-gym[verl]"``): the curriculum
  as verl's curriculum sampler with its slot dataset, the env inside verl's agent loop, and the trainer hook
  verl 0.9 needs to update the sampler with each batch.
- :mod:`.openenv` (``pip install "rods-gym[openenv]"``): every rods chat env as an OpenEnv MCP environment on
  OpenEnv's own server (``python -m rods_gym.integrations.openenv --port 8000``) and its client.
- :mod:`.verifiers` (``pip install "rods-gym[verifiers]"``): ``load_environment(env_id=..., split=...)`` for
  verifiers 0.4 (fixed splits: its taskset gets no group results back).
- shared: :mod:`.episodes` (an env episode driven by action texts), :mod:`.tool_episode` (a chat-view episode
  played by tool calls), :mod:`.rows` (verl dataset rows, parquet), :mod:`.commands` (``rods tasks``).
  :mod:`.schedule` and :mod:`.sources` re-export their old names from :mod:`rods_gym.curricula` for one release.
"""
