"""Tasks as rows of verl's RL dataset format, and the parquet files ``rods tasks --to-parquet`` writes.

One row per task, in the columns verl's ``RLHFDataset`` reads (verl 0.9): ``data_source``, ``prompt`` (the
task's opening messages in chat-template form, as the chat view shows them), ``ability``,
``reward_model`` (``style: env``: the reward comes from the environment, not a rule on the text),
``extra_info`` (``index``, ``split``, ``task_id``, ``env_id`` and ``rods_task``, the task as JSON, which
the agent loop replays) and ``agent_name`` (``rods_env``, the agent loop of
:mod:`rods_gym.integrations.verl_agent_loop`). This module needs only the core and ``pyarrow``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import rods_gym  # noqa: F401  (registers the rods/* ids)
from rods_gym.task import TaskSpec

from .episodes import TextEpisode, make_text_env

AGENT_NAME = "rods_env"
DATA_SOURCE = "rods_gym"
DEFAULT_ENV_ID = "rods/ToolChain-Chat-v0"
COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError("writing or reading parquet needs pyarrow: pip install pyarrow (it comes with "
                          "rods-gym[trl] and rods-gym[verl])") from None
    return pyarrow


def task_row(task: TaskSpec, messages: Sequence[dict[str, Any]], *, index: int, split: str, env_id: str
             ) -> dict[str, Any]:
    """The verl row of ``task`` whose opening ``messages`` (from ``env_id``'s reset) the prompt holds."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in messages],
        "ability": "tool_use",
        "reward_model": {"style": "env", "ground_truth": task.id},
        "extra_info": {"index": index, "split": split, "task_id": task.id, "env_id": env_id, "rods_task": task.to_json()},
        "agent_name": AGENT_NAME,
    }


def task_rows(tasks: Sequence[TaskSpec], env_id: str = DEFAULT_ENV_ID, split: str = "") -> list[dict[str, Any]]:
    """verl rows of ``tasks``: their opening messages as ``env_id`` renders them, the task itself in ``extra_info``."""
    env = make_text_env(env_id)
    episode = TextEpisode(env)
    rows = [task_row(task, episode.start(task)[0], index=i, split=split, env_id=env_id) for i, task in enumerate(tasks)]
    env.close()
    return rows


def write_parquet(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    pa = _pyarrow()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pa.parquet.write_table(pa.Table.from_pylist(list(rows)), path)
    return path


def read_task_rows(paths: str | Path | Iterable[str | Path]) -> list[tuple[TaskSpec, str]]:
    """``(task, env_id)`` of every row of the parquet file(s) ``paths`` (as written by :func:`write_parquet`)."""
    pa = _pyarrow()
    files = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not files:
        raise ValueError("no parquet file given")
    out = []
    for f in files:
        path = Path(str(f)).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"no parquet file {path} (write one with rods tasks --split train --to-parquet {path})")
        table = pa.parquet.read_table(path, columns=["extra_info"])
        for i, info in enumerate(table.column("extra_info").to_pylist()):
            if not isinstance(info, dict) or not info.get("rods_task"):
                raise ValueError(f"{path}, row {i}: no extra_info.rods_task; this file was not written by "
                                 "rods tasks --to-parquet")
            out.append((TaskSpec.from_json(info["rods_task"]), str(info.get("env_id") or DEFAULT_ENV_ID)))
    return out
