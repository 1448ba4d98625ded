"""rods-gym: simulated multi-turn tool-use environments for training LLM agents with RL.

``import rods_gym`` registers ``rods/ToolChain-v0`` and its variants with Gymnasium.
"""

from __future__ import annotations

from .domain import DomainError, ToolSpec
from .env import ToolChainEnv, load_split
from .episode import Ask, Reply, RewardConfig, ToolCall
from .oracle import oracle_action, solve
from .registration import register_envs
from .sampler import DIFFICULTIES, SamplerConfig, TaskSampler
from .signature import Signature, compute_signature
from .suite import Suite, default_suite
from .task import TaskSpec, read_jsonl, write_jsonl

__version__ = "0.1.0"
ENV_IDS = register_envs()

__all__ = [
    "DIFFICULTIES", "ENV_IDS", "Ask", "DomainError", "Reply", "RewardConfig", "SamplerConfig", "Signature", "Suite",
    "TaskSampler", "TaskSpec", "ToolCall", "ToolChainEnv", "ToolSpec", "compute_signature", "default_suite",
    "load_split", "oracle_action", "read_jsonl", "solve", "write_jsonl",
]
