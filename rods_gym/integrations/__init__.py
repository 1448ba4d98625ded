"""Adapters that let other trainers (TRL, verl) use rods-gym envs and the curricula (RODS by default).

Nothing is imported here: each adapter needs its host's packages.

- :mod:`.trl` (``pip install "rods-gym[trl]"``): TRL's ``GRPOTrainer`` through ``rollout_func``, a slot dataset
  whose tasks the curriculum picks, and a callback that feeds it the rewards TRL logged.
- :mod:`.verl`, :mod:`.verl_agent_loop`, :mod:`.verl_trainer` (``pip install "rods-gym[verl]"``): the curriculum
  as verl's curriculum sampler with its slot dataset, the env inside verl's agent loop, and the trainer hook
  verl 0.9 needs to update the sampler with each batch.
- shared: :mod:`.schedule` (slots -> tasks, host rewards -> ``source.observe``), :mod:`.episodes` (an env episode
  driven by action texts), :mod:`.sources` (curricula by name), :mod:`.rows` (verl dataset rows, parquet).
"""
