"""Per-step metrics to JSONL and TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch


def memory_mb(device: torch.device | None = None) -> dict[str, float]:
    """This process's memory now: ``mem_rss_mb``, its resident set (psutil), and on a CUDA ``device``
    ``mem_gpu_mb`` / ``mem_gpu_peak_mb``, the memory torch has allocated there now and at most since the
    last call (whose peak this call resets; the first call's peak covers everything before it). A long run's curve of them should stay flat."""
    import psutil

    out = {"mem_rss_mb": psutil.Process().memory_info().rss / 2**20}
    if device is not None and device.type == "cuda":
        out["mem_gpu_mb"] = torch.cuda.memory_allocated(device) / 2**20
        out["mem_gpu_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
        torch.cuda.reset_peak_memory_stats(device)
    return out


class MetricsLogger:
    """Appends one JSON line per record to ``path`` and mirrors scalars to TensorBoard.

    ``rewrite(records)`` replaces the file's content (used on resume, so the log holds exactly
    the records up to the checkpoint's step); ``purge_step`` does the same for TensorBoard.
    """

    def __init__(self, path: str | Path, tensorboard_dir: str | Path | None = None,
                 purge_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = None
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: TensorBoard hides earlier events at steps >= it (a resumed run replays them)
            self.writer = SummaryWriter(str(tensorboard_dir), purge_step=purge_step)

    def rewrite(self, records: Sequence[Mapping[str, Any]]) -> None:
        with self.path.open("w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")

    def log(self, record: Mapping[str, Any], step: int, prefix: str = "train") -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(dict(record)) + "\n")
        self.log_scalars(record, step, prefix)

    def log_scalars(self, record: Mapping[str, Any], step: int, prefix: str = "train") -> None:
        """The record's numbers to TensorBoard only, as ``prefix/key``."""
        if self.writer is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                    self.writer.add_scalar(f"{prefix}/{k}", v, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
