"""Arm "offline": the offline pipeline, epochs over a large task set synthesized once, up front.

The set is ``rods synth --n 17000 --out PATH`` (:func:`rods_gym.synth.synthesize`: variants of uniformly
chosen seeds through the skill-aligned resampler), read from JSONL.
"""

from __future__ import annotations

from pathlib import Path

from ..task import read_jsonl
from .fixed import FixedSeeds


class OfflinePipeline(FixedSeeds):
    """Uniform epochs (seeded shuffles) over a fixed set of pre-synthesized tasks."""

    name = "offline"

    @classmethod
    def from_jsonl(cls, path: str | Path, seed: int = 0) -> "OfflinePipeline":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"offline task file {path} does not exist; synthesize it with "
                                    f"`rods synth --n 17000 --out {path}`")
        tasks = read_jsonl(path)
        if not tasks:
            raise ValueError(f"offline task file {path} holds no tasks")
        return cls(tasks, seed)
