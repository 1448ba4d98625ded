"""The stateful backend of an episode.

A :class:`World` is the immutable base state generated from a seed: one table per entity,
records as plain dicts. Generation is deterministic: a per-world ``numpy.random.Generator``
draws from value pools that a per-suite ``Faker`` instance filled from a fixed seed (Faker
is slow, about 0.1 ms a value, so it fills pools once and worlds draw from them).

A :class:`WorldState` is one episode's view of a world: reads fall through to the base
tables, writes go to a small overlay, so starting an episode costs nothing and the base is
never mutated. Rejected calls never reach :meth:`WorldState.put`.
"""

from __future__ import annotations

import datetime as _dt
import string
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from faker import Faker

from .domain import Domain, EntitySpec, FieldSpec

POOL_SIZE = 400
Record = dict[str, Any]


def _plain(value: Any) -> Any:
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()[:10]
    return value


class ValuePools:
    """Faker-generated pools of values, one per (provider, args), filled lazily."""

    def __init__(self, seed: int = 0, size: int = POOL_SIZE) -> None:
        self._faker = Faker("en_US")
        self._seed, self._size = seed, size
        self._pools: dict[str, tuple[Any, ...]] = {}

    def pool(self, provider: str, args: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
        key = provider + repr(sorted((args or {}).items()))
        pool = self._pools.get(key)
        if pool is None:
            fn = getattr(self._faker, provider, None)
            if fn is None:
                raise ValueError(f"Faker has no provider {provider!r}")
            self._faker.seed_instance(self._seed + len(self._pools))
            seen: dict[Any, None] = {}
            for _ in range(self._size * 4):  # bounded: duplicates are dropped
                seen[_plain(fn(**(args or {})))] = None
                if len(seen) >= self._size:
                    break
            pool = tuple(seen)
            self._pools[key] = pool
        return pool


def _template(text: str, rng: np.random.Generator, index: int) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "{":
            j = text.index("}", i)
            token = text[i + 1 : j]
            if token == "n":
                out.append(str(index))
            elif token[0] == "d":
                out.append("".join(str(d) for d in rng.integers(0, 10, int(token[1:]))))
            elif token[0] == "L":
                out.append("".join(string.ascii_uppercase[k] for k in rng.integers(0, 26, int(token[1:]))))
            else:
                raise ValueError(f"unknown template token {{{token}}} in {text!r}")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def generate_value(f: FieldSpec, rng: np.random.Generator, pools: ValuePools, index: int,
                   tables: Mapping[str, Mapping[str, Record]]) -> Any:
    """One value for a field, drawn with ``rng`` (used for records and for created records)."""
    g = f.generator
    if "choice" in g:
        return g["choice"][int(rng.integers(0, len(g["choice"])))]
    if "integers" in g:
        lo, hi = g["integers"]
        return int(rng.integers(lo, hi + 1))
    if "uniform" in g:
        lo, hi = g["uniform"]
        return round(float(rng.uniform(lo, hi)), 2)
    if "ref" in g:
        ids = list(tables[g["ref"]])
        return ids[int(rng.integers(0, len(ids)))]
    if "dates" in g:
        lo, hi = (_dt.date.fromisoformat(x).toordinal() for x in g["dates"])
        return _dt.date.fromordinal(int(rng.integers(lo, hi + 1))).isoformat()
    if "template" in g:
        return _template(g["template"], rng, index)
    pool = pools.pool(g["faker"], g.get("faker_args"))
    return pool[int(rng.integers(0, len(pool)))]


def _entity_order(domain: Domain) -> list[EntitySpec]:
    done: list[EntitySpec] = []
    pending = list(domain.entities.values())
    for _ in range(len(pending) + 1):  # refs are acyclic (checked on load)
        for e in list(pending):
            if all(f.ref is None or f.ref in {d.name for d in done} for f in e.fields):
                done.append(e)
                pending.remove(e)
    assert not pending, "entity references are cyclic"
    return done


@dataclass(frozen=True)
class World:
    """Immutable base state: ``tables[entity][id] -> record``."""

    seed: int
    tables: Mapping[str, Mapping[str, Record]]

    @classmethod
    def generate(cls, domains: Sequence[Domain], seed: int, pools: ValuePools) -> "World":
        rng = np.random.default_rng([seed, 7919])
        tables: dict[str, dict[str, Record]] = {}
        for domain in domains:
            for ent in _entity_order(domain):
                ids = np.sort(rng.choice(9000, size=ent.count, replace=False)) + 1000
                table: dict[str, Record] = {}
                used: dict[str, set[Any]] = {f.name: set() for f in ent.fields if f.unique}
                for i, num in enumerate(ids):
                    rec: Record = {ent.id_field: f"{ent.id_prefix}-{int(num)}"}
                    for f in ent.fields[1:]:
                        value = generate_value(f, rng, pools, i, tables)
                        if f.unique:
                            for _ in range(50):  # bounded retries for a fresh value
                                if value not in used[f.name]:
                                    break
                                value = generate_value(f, rng, pools, i, tables)
                            if value in used[f.name]:
                                raise ValueError(f"{ent.name}.{f.name}: cannot draw {ent.count} unique values")
                            used[f.name].add(value)
                        rec[f.name] = value
                    table[rec[ent.id_field]] = rec
                tables[ent.name] = table
        return cls(seed, tables)


class WorldState:
    """One episode's mutable view over a :class:`World` (copy-on-write overlay)."""

    __slots__ = ("world", "_overlay", "_created")

    def __init__(self, world: World) -> None:
        self.world = world
        self._overlay: dict[str, dict[str, Record | None]] = {}
        self._created: dict[str, int] = {}

    def fork(self) -> "WorldState":
        other = WorldState(self.world)
        other._overlay = {e: dict(t) for e, t in self._overlay.items()}
        other._created = dict(self._created)
        return other

    def get(self, entity: str, rid: Any) -> Record | None:
        over = self._overlay.get(entity)
        if over is not None and rid in over:
            return over[rid]
        if not isinstance(rid, str):
            return None
        return self.world.tables[entity].get(rid)

    def records(self, entity: str) -> Iterator[Record]:
        over = self._overlay.get(entity)
        base = self.world.tables[entity]
        if not over:
            yield from base.values()
            return
        for rid, rec in base.items():
            if rid in over:
                if over[rid] is not None:
                    yield over[rid]  # type: ignore[misc]
            else:
                yield rec
        for rid, rec in over.items():
            if rid not in base and rec is not None:
                yield rec

    def put(self, entity: str, record: Record, id_field: str) -> None:
        self._overlay.setdefault(entity, {})[record[id_field]] = record

    def remove(self, entity: str, rid: str) -> None:
        self._overlay.setdefault(entity, {})[rid] = None

    def new_id(self, ent: EntitySpec) -> str:
        n = self._created.get(ent.name, 0)
        self._created[ent.name] = n + 1
        return f"{ent.id_prefix}-{20001 + n}"

    @property
    def changed(self) -> int:
        """How many records this episode has written (0 means the world is untouched)."""
        return sum(len(t) for t in self._overlay.values())
