"""verl adapter, data side: the RODS curriculum as verl's curriculum sampler, and the slot dataset it draws
rows from. Install with ``pip install "rods-gym[verl]"``; the agent loop is in
:mod:`rods_gym.integrations.verl_agent_loop`, the trainer hook for verl 0.9 in
:mod:`rods_gym.integrations.verl_trainer`, launch recipes in ``examples/verl/``.

**The sampler interface.** verl 0.4-0.7 define ``verl.experimental.dataset.sampler.AbstractCurriculumSampler``:
a ``torch.utils.data.Sampler`` built as ``cls(data_source=dataset, data_config=config.data)``, chosen with
``data.sampler.class_path`` / ``data.sampler.class_name``, and updated after every training step with
``sampler.update(batch=batch)`` (the step's ``DataProto``, rewards included); verl asks for
``data.dataloader_num_workers=0`` so no batch is fetched before the previous one was observed.
verl 0.8 removed that interface and the update call (checked in the 0.8.0, 0.9.0 and 0.9.1 wheels);
:class:`RODSCurriculumSampler` subclasses verl's class where verl has it and, elsewhere, a shim of the same
interface (:class:`AbstractCurriculumSampler` below); on verl 0.9 :mod:`.verl_trainer` calls ``update``.

**Slots.** The sampler yields slot ids; its :class:`~rods_gym.integrations.schedule.SlotSchedule` maps slot
``s`` to position ``s % k`` of curriculum batch ``s // k`` (``k = data.train_batch_size``), drawing a batch
from the task source when its first slot is fetched. :class:`RODSTaskDataset` (``data.custom_cls``) turns a
slot into a verl row (the task's opening messages, ``agent_name: rods_env``, the task in ``extra_info``).
``update(batch)`` reads each rollout's slot (``non_tensor_batch["rods_slot"]``, or ``extra_info["rods_slot"]``) and its score
(``batch["token_level_scores"].sum(-1)``, the env's return the agent loop reported, from which verl's
advantages are computed) and the source observes every complete batch: no extra episode.

**State.** ``state_dict``/``load_state_dict`` make the sampler ``Stateful``; verl's ``StatefulDataLoader``
saves it in each checkpoint's ``data.pt`` and restores it on resume, so a resumed run serves the same tasks.

**Config** (under ``data.rods``, added with hydra's ``+``): ``group_size`` (G, must equal
``actor_rollout_ref.rollout.n``), ``steps`` (training steps the sampler serves), ``source`` (``rods``,
``naive``, ``replay_only`` or ``fixed``), ``seed``, ``options`` (RODSConfig fields).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from rods_gym.task import TaskSpec

from .episodes import TextEpisode, make_text_env
from .rows import DEFAULT_ENV_ID, read_task_rows, task_row
from ..curricula import Rollout, SlotSchedule, make_source

SLOT_FIELD = "rods_slot"


class AbstractCurriculumSampler(Sampler[int], ABC):
    """verl 0.4-0.7's curriculum-sampler interface (``verl.experimental.dataset.sampler``), for verl versions
    without it: a sampler built from ``(data_source, data_config)`` and updated with each training batch."""

    @abstractmethod
    def __init__(self, data_source: Any, data_config: Any) -> None:
        ...

    @abstractmethod
    def update(self, batch: Any) -> None:
        ...


try:  # verl 0.4-0.7: subclass verl's own class, so its trainer recognizes the sampler and calls update()
    from verl.experimental.dataset.sampler import AbstractCurriculumSampler as _SamplerBase

    SAMPLER_BASE = "verl"
except ImportError:  # verl absent, or 0.8+ (the interface was removed): the shim above
    _SamplerBase = AbstractCurriculumSampler  # type: ignore[misc]
    SAMPLER_BASE = "shim"


def plain(value: Any) -> Any:
    """An OmegaConf node (verl's configs) as plain Python; other values unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:
        return value
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


class RODSTaskDataset(Dataset):
    """verl's ``data.custom_cls``: the tasks of parquet file(s) written by ``rods tasks --to-parquet``.

    Unbound (the validation set, or any dataset no sampler drives), item ``i`` is row ``i``. Bound to a
    :class:`RODSCurriculumSampler` (which binds the training set it is built with), item ``s`` is the row
    of curriculum slot ``s``: the task the curriculum picks for it, with ``rods_slot`` set.
    Constructed by verl as ``cls(data_files=..., tokenizer=..., processor=..., config=data, max_samples=...)``.
    """

    def __init__(self, data_files: str | Sequence[str], tokenizer: Any = None, config: Any = None, processor: Any = None,
                 max_samples: int = -1, **_: Any) -> None:
        files = [data_files] if isinstance(data_files, str) else [str(f) for f in plain(data_files)]
        rows = read_task_rows(files)
        if max_samples is not None and max_samples > 0:
            rows = rows[:max_samples]
        if not rows:
            raise ValueError(f"no tasks in {files}")
        env_ids = sorted({e for _, e in rows})
        if len(env_ids) > 1:
            raise ValueError(f"{files} mix environments {env_ids}; write one parquet per environment")
        self._setup([t for t, _ in rows], env_ids[0])

    @classmethod
    def from_tasks(cls, tasks: Sequence[TaskSpec], env_id: str = DEFAULT_ENV_ID) -> "RODSTaskDataset":
        """The dataset of ``tasks`` without a parquet file (from Python)."""
        if not tasks:
            raise ValueError("RODSTaskDataset needs at least one task")
        make_text_env(env_id).close()
        dataset = cls.__new__(cls)
        dataset._setup(list(tasks), env_id)
        return dataset

    def _setup(self, tasks: list[TaskSpec], env_id: str) -> None:
        self.tasks: list[TaskSpec] = tasks
        self.env_id = env_id
        self.schedule: SlotSchedule | None = None
        self._episode: TextEpisode | None = None

    def bind(self, schedule: SlotSchedule) -> None:
        self.schedule = schedule

    def __len__(self) -> int:
        return len(self.tasks)

    def row(self, task: TaskSpec, index: int) -> dict[str, Any]:
        """A verl row of ``task``: as ``rows.task_rows`` writes it, plus what verl's RLHFDataset adds."""
        if self._episode is None:
            self._episode = TextEpisode(make_text_env(self.env_id))
        row = task_row(task, self._episode.start(task)[0], index=index, split="", env_id=self.env_id)
        return {**row, "raw_prompt": row["prompt"], "index": index, "tools_kwargs": {}, "interaction_kwargs": {},
                "dummy_tensor": torch.tensor([0], dtype=torch.uint8)}  # verl's DataProto needs one tensor

    def __getitem__(self, item: int) -> dict[str, Any]:
        item = int(item)
        if self.schedule is None:
            return self.row(self.tasks[item], item)
        row = self.row(self.schedule.task(item), item)
        row[SLOT_FIELD] = item
        row["extra_info"][SLOT_FIELD] = item
        return row


def rods_options(data_config: Any) -> dict[str, Any]:
    cfg = plain(data_config)
    opts = plain((cfg or {}).get("rods") or {})
    known = {"group_size", "steps", "source", "seed", "options"}
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ValueError(f"data.rods: unknown key(s) {unknown}; it takes {sorted(known)}")
    missing = [k for k in ("group_size", "steps") if k not in opts]
    if missing:
        raise ValueError(f"data.rods.{missing[0]} is required (+data.rods.group_size=<actor_rollout_ref.rollout.n> "
                         "+data.rods.steps=<training steps>)")
    return opts


def batch_slots(non_tensor: Mapping[str, Any] | None) -> list[int] | None:
    """Each rollout's slot: the ``rods_slot`` column, else ``extra_info["rods_slot"]`` (verl 0.9's trainer moves every
    column but ``data_source``, ``reward_model``, ``extra_info`` and ``uid`` out of the batch it trains on)."""
    if not non_tensor:
        return None
    if SLOT_FIELD in non_tensor:
        return [int(s) for s in non_tensor[SLOT_FIELD]]
    infos = non_tensor.get("extra_info")
    if infos is None or any(not isinstance(i, Mapping) or i.get(SLOT_FIELD) is None for i in infos):
        return None
    return [int(i[SLOT_FIELD]) for i in infos]


class RODSCurriculumSampler(_SamplerBase):
    """The RODS curriculum (or another rods-gym source) as verl's curriculum sampler. See the module docs."""

    def __init__(self, data_source: RODSTaskDataset, data_config: Any) -> None:
        if not isinstance(data_source, RODSTaskDataset):
            raise TypeError(f"RODSCurriculumSampler draws rows from a RODSTaskDataset (data.custom_cls.path="
                            f"pkg://rods_gym.integrations.verl, data.custom_cls.name=RODSTaskDataset), got "
                            f"{type(data_source).__name__}")
        cfg = plain(data_config) or {}
        workers = cfg.get("dataloader_num_workers", 0)
        if workers:
            raise ValueError(f"data.dataloader_num_workers={workers}: the curriculum needs 0, or workers fetch "
                             "batches before the previous one was observed")
        opts = rods_options(cfg)
        k = int(cfg.get("gen_batch_size") or cfg["train_batch_size"])
        group = int(opts["group_size"])
        source = make_source(str(opts.get("source", "rods")), data_source.tasks, seed=int(opts.get("seed", 0)),
                             group_size=group, options=opts.get("options") or {})
        self.schedule = SlotSchedule(source, k, group)
        self.steps = int(opts["steps"])
        if self.steps < 1:
            raise ValueError(f"data.rods.steps must be >= 1, got {self.steps}")
        self.next_slot = 0
        self.updates = 0
        data_source.bind(self.schedule)
        self.data_source = data_source

    def __len__(self) -> int:
        return self.steps * self.schedule.tasks_per_batch

    def __iter__(self) -> Iterator[int]:
        while self.next_slot < len(self):
            slot = self.next_slot
            self.next_slot += 1
            yield slot

    def update(self, batch: Any) -> None:
        """Observe the curriculum batches complete in ``batch`` (verl's ``DataProto`` of one training step)."""
        non_tensor = getattr(batch, "non_tensor_batch", None)
        tensors = getattr(batch, "batch", None)
        slots = batch_slots(non_tensor)
        if tensors is None or slots is None:
            raise ValueError(f"update(batch): no {SLOT_FIELD!r} in the batch's non_tensor_batch or its extra_info; its "
                             "rows must come from RODSTaskDataset driven by this sampler")
        if "token_level_scores" not in tensors.keys():
            raise ValueError("update(batch): the batch has no token_level_scores (call update after the rewards)")
        scores = tensors["token_level_scores"].sum(-1).tolist()
        successes = non_tensor.get("rods_success")
        oks = [bool(s) for s in successes] if successes is not None else [False] * len(slots)
        self.schedule.record([Rollout(s, float(r), ok) for s, r, ok in zip(slots, scores, oks, strict=True)])
        self.updates += 1

    def telemetry(self) -> dict[str, float]:
        return self.schedule.telemetry()

    def state_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule.state_dict(), "next_slot": self.next_slot, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.schedule.load_state_dict(state["schedule"])
        self.next_slot = int(state["next_slot"])
        self.updates = int(state["updates"])


__all__ = ["AbstractCurriculumSampler", "RODSCurriculumSampler", "RODSTaskDataset", "SAMPLER_BASE"]
