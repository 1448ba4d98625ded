"""Tasks: one user goal over one or more user turns, each turn a call DAG.

Calls are numbered across the whole task (``c0``, ``c1``...) and carry their turn. A
:class:`Dep` says that argument ``param`` of call ``dst`` is the value of output ``field``
of call ``src``: the agent can only learn it by making ``src`` first. Every other argument
is a *fact* the user states (or, when withheld, gives when asked).

Tasks serialize to JSON lines and round-trip exactly (``TaskSpec.from_dict(t.to_dict()) == t``).
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

TURN_TYPES = ("plain", "missing_param", "missing_tool", "answer")

# The turn types the task sets are stratified by (a task's ``meta["stratum"]``: the task-set builder's STRATA), in
# the words reports use (benchmarks/RESULTS.md): the one place a stratum's name for people is defined.
STRATUM_NAMES = {"plain": "plain", "answer": "information goal", "multi_turn": "two user turns",
                 "missing_param": "withheld parameter", "missing_tool": "withheld tool"}


def stratum_name(stratum: str) -> str:
    """A stratum in words (``answer`` -> ``information goal``); a name not in ``STRATUM_NAMES`` (BFCL's
    categories) as it is."""
    return STRATUM_NAMES.get(stratum, stratum)


def format_value(value: Any) -> str:
    """How a value is written in an answer (the same as in a tool's JSON output)."""
    kind = type(value)
    if kind is int or (kind is float and math.isfinite(value)):
        return repr(value)  # what json.dumps writes, without its encoder's overhead
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Call:
    """One required call. ``args`` is kept in one canonical order (sorted by parameter name),
    whatever order it was built in: renderers, the oracle and instructions iterate it, so a
    freshly sampled task and the same task read back from JSON (which sorts keys) must look
    the same to an agent."""

    id: str
    tool: str
    args: Mapping[str, Any]
    turn: int = 0

    def __post_init__(self) -> None:
        keys = list(self.args)
        ordered = sorted(keys)
        if keys != ordered:
            object.__setattr__(self, "args", {k: self.args[k] for k in ordered})

    def __hash__(self) -> int:
        return hash((self.id, self.tool))


@dataclass(frozen=True)
class Dep:
    src: str
    dst: str
    param: str
    field: str


@dataclass(frozen=True)
class Turn:
    """One user turn: its message, the tools locked until the agent replies once (missing
    tool), and the facts withheld until the agent asks (missing parameter), as
    ``(call id, param)`` pairs."""

    message: str
    locked: tuple[str, ...] = ()
    withheld: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Answer:
    """An information goal: the final reply must contain ``value`` (output ``field`` of ``call``)."""

    call: str
    field: str
    value: str


@dataclass(frozen=True)
class TaskSpec:
    id: str
    world_seed: int
    calls: tuple[Call, ...]
    deps: tuple[Dep, ...]
    turns: tuple[Turn, ...]
    distractors: tuple[str, ...] = ()
    answer: Answer | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.id)

    # -- derived views -----------------------------------------------------------------
    def call(self, cid: str) -> Call:
        for c in self.calls:
            if c.id == cid:
                return c
        raise KeyError(cid)

    def bound(self, cid: str) -> dict[str, Dep]:
        """Arguments of call ``cid`` that come from earlier calls, by parameter."""
        return {d.param: d for d in self.deps if d.dst == cid}

    def facts(self, turn: int | None = None) -> list[tuple[str, str, Any]]:
        """User-stated ``(call id, param, value)`` triples, in call order."""
        out = []
        for c in self.calls:
            if turn is not None and c.turn != turn:
                continue
            b = self.bound(c.id)
            out.extend((c.id, p, v) for p, v in c.args.items() if p not in b)
        return out

    @property
    def tools(self) -> tuple[str, ...]:
        """Tools the task needs, plus distractors, in a stable order."""
        seen = dict.fromkeys(c.tool for c in self.calls)
        seen.update(dict.fromkeys(self.distractors))
        return tuple(seen)

    def turn_types(self) -> tuple[tuple[str, ...], ...]:
        out = []
        for i, t in enumerate(self.turns):
            kinds = set()
            if t.withheld:
                kinds.add("missing_param")
            if t.locked:
                kinds.add("missing_tool")
            if self.answer is not None and i == len(self.turns) - 1:
                kinds.add("answer")
            out.append(tuple(sorted(kinds)) or ("plain",))
        return tuple(out)

    def with_meta(self, **kw: Any) -> "TaskSpec":
        return replace(self, meta={**self.meta, **kw})

    # -- serialization -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "world_seed": self.world_seed,
            "calls": [{"id": c.id, "tool": c.tool, "args": dict(c.args), "turn": c.turn} for c in self.calls],
            "deps": [[d.src, d.dst, d.param, d.field] for d in self.deps],
            "turns": [{"message": t.message, "locked": list(t.locked), "withheld": [list(w) for w in t.withheld]}
                      for t in self.turns],
            "distractors": list(self.distractors),
            "answer": None if self.answer is None else [self.answer.call, self.answer.field, self.answer.value],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TaskSpec":
        known = {f.name for f in fields(cls)}
        extra = set(d) - known
        if extra:
            raise ValueError(f"unknown task keys {sorted(extra)}")
        seed = d.get("world_seed")
        if isinstance(seed, bool) or not isinstance(seed, int) and not (isinstance(seed, str) and seed.strip().isdigit()):
            raise ValueError(f"malformed task {d.get('id', '?')!r}: world_seed must be an integer, got {seed!r}")
        try:
            return cls(
                id=str(d["id"]),
                world_seed=int(seed),
                calls=tuple(Call(c["id"], c["tool"], dict(c["args"]), int(c.get("turn", 0))) for c in d["calls"]),
                deps=tuple(Dep(*x) for x in d.get("deps", ())),
                turns=tuple(Turn(t["message"], tuple(t.get("locked", ())), tuple(tuple(w) for w in t.get("withheld", ())))
                            for t in d["turns"]),
                distractors=tuple(d.get("distractors", ())),
                answer=None if d.get("answer") is None else Answer(*d["answer"]),
                meta=dict(d.get("meta", {})),
            )
        except KeyError as exc:
            raise ValueError(f"malformed task {d.get('id', '?')!r}: missing key {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed task {d.get('id', '?')!r}: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "TaskSpec":
        return cls.from_dict(json.loads(text))


def write_jsonl(tasks: Iterable[TaskSpec], path: str | Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w") as fh:
        for t in tasks:
            fh.write(t.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[TaskSpec]:
    return list(iter_jsonl(path))


def iter_jsonl(path: str | Path) -> Iterator[TaskSpec]:
    with Path(path).open() as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield TaskSpec.from_json(line)
                except ValueError as exc:
                    raise ValueError(f"{path}:{lineno}: {exc}") from None


def task_generator(task: TaskSpec) -> np.random.Generator:
    """A generator seeded by the task alone (its id and world seed): draws that belong to the task's
    rendering, the same in every episode of it whatever the env's seed."""
    return np.random.default_rng([int(task.world_seed) % 2**63, zlib.crc32(task.id.encode("utf-8"))])
