"""rods_gym.trainer: LLM policies, batched multi-turn rollouts, SFT, GRPO, curricula, evaluation.

Modules, in the order data flows: ``tokenization``/``policy`` (the model), ``transcript`` and
``generation`` (token ids and sampling), ``rollout`` (episodes over envs), ``grpo`` (the loss),
``sft`` (warm start), ``task_source``/``sources`` (curricula by name), ``loop`` (GRPO
training), ``evaluation``, ``checkpoint``, ``metrics``, ``plots``, ``pipeline`` (``rods train``),
``commands`` (the CLI). Configuration: ``config.TrainConfig`` and ``configs/*.yaml``.
"""

import os as _os

# libgomp (torch's CPU thread pool) busy-waits between parallel regions by default; on a CPU
# shared with other processes that makes the many small ops of token-by-token decoding up to
# ~100x slower. Passive waiting costs nothing measurable when the CPU is idle. This only sets
# a default (an explicit OMP_WAIT_POLICY wins) and only matters if torch is not imported yet.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
