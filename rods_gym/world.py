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

import threading
import datetime as _dt
import random
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

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
    """Faker-generated pools of values, one per (provider, args), filled lazily.

    A pool's values depend on how many pools were made before it (its Faker seed), so pools are made under a lock
    (one thread at a time) and a suite generates its worlds one at a time (:meth:`rods_gym.suite.Suite.world`):
    threads then see the pools a single thread makes."""

    def __init__(self, seed: int = 0, size: int = POOL_SIZE) -> None:
        self._faker = Faker("en_US")
        self._seed, self._size = seed, size
        self._pools: dict[str, tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @staticmethod
    def key(provider: str, args: Mapping[str, Any] | None = None) -> str:
        return provider + repr(sorted((args or {}).items()))

    def pool(self, provider: str, args: Mapping[str, Any] | None = None, key: str | None = None) -> tuple[Any, ...]:
        """The pool of ``provider(**args)`` values (``key``: :meth:`key` of the two, if known)."""
        if key is None:
            key = self.key(provider, args)
        pool = self._pools.get(key)
        if pool is None:
            with self._lock:
                return self._make(provider, args, key)
        return pool

    def _make(self, provider: str, args: Mapping[str, Any] | None, key: str) -> tuple[Any, ...]:
        pool = self._pools.get(key)  # another thread may have made it while this one waited
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


def _template(text: str, rng: Rng, index: int) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "{":
            j = text.index("}", i)
            token = text[i + 1 : j]
            if token == "n":
                out.append(str(index))
            elif token[0] == "d":
                out.append("".join(map(str, rng.integers(0, 10, int(token[1:])).tolist())))
            elif token[0] == "L":
                out.append("".join(string.ascii_uppercase[k] for k in rng.integers(0, 26, int(token[1:])).tolist()))
            else:
                raise ValueError(f"unknown template token {{{token}}} in {text!r}")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _template_parts(text: str) -> list[str | tuple[str, int]] | None:
    """A template split into literal text and ``("n", 0)``/``("d", k)``/``("L", k)`` tokens, or
    ``None`` when it has a token :func:`_template` rejects (it then raises at draw time)."""
    parts: list[str | tuple[str, int]] = []
    i = 0
    while i < len(text):
        j = text.find("{", i)
        if j < 0:
            parts.append(text[i:])
            break
        if j > i:
            parts.append(text[i:j])
        k = text.find("}", j)
        if k < 0:
            return None
        token = text[j + 1 : k]
        if token == "n":
            parts.append(("n", 0))
        elif token[:1] in ("d", "L") and token[1:].isdigit() and token[1:].isascii():
            parts.append((token[0], int(token[1:])))
        else:
            return None
        i = k + 1
    return parts


class PyRng(random.Random):
    """Python's Mersenne Twister with the part of :class:`numpy.random.Generator`'s interface
    that value draws use (``integers``, ``random``, ``uniform``). A single draw costs a
    fraction of numpy's (about 0.15 µs against 2 µs), which matters to code that makes many
    scalar draws, such as the task sampler."""

    def below(self, n: int) -> int:
        """A uniform int in ``[0, n)``: one double scaled to ``n`` (relative bias under 2**-29)
        for ``n`` up to 2**24, else :meth:`randrange`."""
        if 0 < n <= 1 << 24:
            return int(self.random() * n)
        return self.randrange(n)

    def integers(self, low: int, high: int | None = None, size: int | None = None) -> Any:
        """As ``Generator.integers``: an int in ``[low, high)`` (``[0, low)`` without ``high``),
        or an array of ``size`` of them."""
        if high is None:
            low, high = 0, low
        if size is None:
            return low + self.below(high - low)
        return np.array([low + self.below(high - low) for _ in range(size)], dtype=np.int64)


Rng = Union[np.random.Generator, PyRng]
Draw = Callable[[Rng, "ValuePools", int, Mapping[str, Any]], Any]


def compile_generator(f: FieldSpec) -> Draw:
    """A function ``draw(rng, pools, index, tables)`` that returns what :func:`generate_value`
    returns for ``f`` and consumes ``rng`` the same way, with the field's spec parsed once."""
    g = f.generator
    if "choice" in g:
        options, n = g["choice"], len(g["choice"])
        return lambda rng, pools, index, tables: options[int(rng.integers(0, n))]
    if "integers" in g:
        lo, hi = g["integers"]
        return lambda rng, pools, index, tables: int(rng.integers(lo, hi + 1))
    if "uniform" in g:
        lo, hi = g["uniform"]
        return lambda rng, pools, index, tables: round(float(rng.uniform(lo, hi)), 2)
    if "ref" in g:
        ref = g["ref"]

        def draw_ref(rng: Rng, pools: ValuePools, index: int, tables: Mapping[str, Any]) -> Any:
            ids = list(tables[ref])  # a table's ids (a mapping id -> record, or the ids themselves)
            return ids[int(rng.integers(0, len(ids)))]

        return draw_ref
    if "dates" in g:
        lo, hi = (_dt.date.fromisoformat(x).toordinal() for x in g["dates"])
        return lambda rng, pools, index, tables: _dt.date.fromordinal(int(rng.integers(lo, hi + 1))).isoformat()
    if "template" in g:
        text = g["template"]
        parts = _template_parts(text)
        if parts is None:
            return lambda rng, pools, index, tables: _template(text, rng, index)
        letters = string.ascii_uppercase

        def draw_template(rng: Rng, pools: ValuePools, index: int, tables: Mapping[str, Any]) -> str:
            out = []
            for part in parts:
                if type(part) is str:
                    out.append(part)
                elif part[0] == "n":
                    out.append(str(index))
                elif part[0] == "d":
                    out.append("".join(map(str, rng.integers(0, 10, part[1]).tolist())))
                else:
                    out.append("".join(letters[k] for k in rng.integers(0, 26, part[1]).tolist()))
            return "".join(out)

        return draw_template
    provider, args = g["faker"], g.get("faker_args")
    key = ValuePools.key(provider, args)

    def draw_faker(rng: Rng, pools: ValuePools, index: int, tables: Mapping[str, Any]) -> Any:
        pool = pools.pool(provider, args, key)
        return pool[int(rng.integers(0, len(pool)))]

    return draw_faker


def generate_value(f: FieldSpec, rng: Rng, pools: ValuePools, index: int,
                   tables: Mapping[str, Any]) -> Any:
    """One value for a field, drawn with ``rng`` (used for records and for created records).

    ``tables[ref]`` gives the ids a ``ref`` field draws from (a mapping id -> record, or the
    ids). Loops that draw many values compile the field once with :func:`compile_generator`."""
    return compile_generator(f)(rng, pools, index, tables)


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
    # value indexes of the (immutable) tables, built on first use by :meth:`index`
    _indexes: dict[tuple[str, str], dict[Any, list[Record]]] = field(default_factory=dict, init=False, repr=False,
                                                                      compare=False)
    # per (entity, field): the values the table holds, built by :meth:`values`
    _values: dict[tuple[str, str], frozenset[Any] | None] = field(default_factory=dict, init=False, repr=False,
                                                                   compare=False)
    # per (entity, field): the field's values in table order, built by :meth:`column`
    _columns: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)
    # per (entity, fields): ids of the records those fields single out, built by :meth:`singled_out`
    _singles: dict[tuple[str, tuple[str, ...]], frozenset[str] | None] = field(default_factory=dict, init=False,
                                                                                repr=False, compare=False)

    @classmethod
    def generate(cls, domains: Sequence[Domain], seed: int, pools: ValuePools) -> "World":
        rng = np.random.default_rng([seed, 7919])
        tables: dict[str, dict[str, Record]] = {}
        for domain in domains:
            for ent in _entity_order(domain):
                ids = np.sort(rng.choice(9000, size=ent.count, replace=False)) + 1000
                table: dict[str, Record] = {}
                used: dict[str, set[Any]] = {f.name: set() for f in ent.fields if f.unique}
                draws = [(f.name, f.unique, compile_generator(f)) for f in ent.fields[1:]] if ent.count else []
                for i, num in enumerate(ids.tolist()):
                    rec: Record = {ent.id_field: f"{ent.id_prefix}-{num}"}
                    for name, unique, draw in draws:
                        value = draw(rng, pools, i, tables)
                        if unique:
                            for _ in range(50):  # bounded retries for a fresh value
                                if value not in used[name]:
                                    break
                                value = draw(rng, pools, i, tables)
                            if value in used[name]:
                                raise ValueError(f"{ent.name}.{name}: cannot draw {ent.count} unique values")
                            used[name].add(value)
                        rec[name] = value
                    table[rec[ent.id_field]] = rec
                tables[ent.name] = table
        return cls(seed, tables)

    def index(self, entity: str, field_name: str) -> Mapping[Any, list[Record]] | None:
        """``value -> records`` of a base table (in table order), or ``None`` when a value is
        unhashable. Built once per (entity, field) and kept: the tables never change."""
        key = (entity, field_name)
        if key in self._indexes:
            return self._indexes[key]
        index: dict[Any, list[Record]] | None = {}
        try:
            for r in self.tables[entity].values():
                index.setdefault(r.get(field_name), []).append(r)  # type: ignore[union-attr]
        except TypeError:  # an unhashable value: callers scan instead
            index = None
        self._indexes[key] = index  # type: ignore[assignment]
        return index

    def values(self, entity: str, field_name: str) -> frozenset[Any] | None:
        """The values of a field in a base table, or ``None`` when one is unhashable. Built once
        per (entity, field) and kept (one set, where :meth:`index` keeps a list per value)."""
        key = (entity, field_name)
        if key in self._values:
            return self._values[key]
        out: frozenset[Any] | None
        try:
            out = frozenset(r.get(field_name) for r in self.tables[entity].values())
        except TypeError:
            out = None
        self._values[key] = out
        return out

    def column(self, entity: str, field_name: str) -> tuple[Any, ...]:
        """``record.get(field_name)`` of every record of a base table, in table order. Built
        once per (entity, field) and kept."""
        key = (entity, field_name)
        out = self._columns.get(key)
        if out is None:
            out = self._columns[key] = tuple([r.get(field_name) for r in self.tables[entity].values()])
        return out

    def singled_out(self, entity: str, fields: tuple[str, ...]) -> frozenset[str] | None:
        """Ids of the records of a base table that no other record equals on all of ``fields``,
        or ``None`` when a value is unhashable. Built once per (entity, fields) and kept."""
        key = (entity, fields)
        if key in self._singles:
            return self._singles[key]
        table = self.tables[entity]
        out: frozenset[str] | None
        try:
            shared = Counter(tuple(r.get(f) for f in fields) for r in table.values())
            out = frozenset(rid for rid, r in table.items() if shared[tuple(r.get(f) for f in fields)] == 1)
        except TypeError:
            out = None
        self._singles[key] = out
        return out


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

    def ids(self, entity: str) -> list[str]:
        """The ids of ``records(entity)``, in the same order."""
        over = self._overlay.get(entity)
        base = self.world.tables[entity]
        if not over:
            return list(base)
        return [rid for rid in base if over.get(rid, base) is not None] + \
            [rid for rid, rec in over.items() if rid not in base and rec is not None]

    def record_list(self, entity: str) -> list[Record]:
        """``records(entity)`` as a list (a plain copy of the base table while it is untouched)."""
        if self._overlay.get(entity):
            return list(self.records(entity))
        return list(self.world.tables[entity].values())

    def base_index(self, entity: str, field_name: str) -> Mapping[Any, list[Record]] | None:
        """The world's ``value -> records`` index of ``entity`` while this episode has not written
        to that entity (``records(entity)`` is then the base table), else ``None``."""
        if self._overlay.get(entity):
            return None
        return self.world.index(entity, field_name)

    def base_singled_out(self, entity: str, fields: tuple[str, ...]) -> frozenset[str] | None:
        """:meth:`World.singled_out` while this episode has not written to ``entity``, else ``None``."""
        if self._overlay.get(entity):
            return None
        return self.world.singled_out(entity, fields)

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
