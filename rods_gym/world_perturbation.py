"""State perturbations that leave a task's own entities and values untouched (environment augmentation).

:func:`perturb_world` draws a few edits of an episode's world: **extra records** (copies of a record of a
table the episode's tools use, under a fresh id, unique fields drawn anew and each other field kept or
drawn anew with even odds, so a search or list may also return them) and **changed fields** of records the
task never touches (ids in its calls' arguments or results). An edit is kept only when the task stays the
same task on the same path: replayed on the edited world, every required call (in task order, with its own
arguments) returns exactly what it returns on the plain world. So the values the user states, the required
calls, their arguments and bindings and the answer are the seed's, the oracle's episode reads the same
results, and the edits show only in the calls a solution does not make (another search, other filters, a
distractor tool, a wrong id), as a busier world would.

Edits go to the episode's copy-on-write :class:`~rods_gym.world.WorldState` (:meth:`WorldPerturbation.apply`),
never to the shared, cached :class:`~rods_gym.world.World`. Every draw comes from the caller's generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .executor import ToolError
from .suite import Suite
from .task import TaskSpec
from .world import Record, WorldState, compile_generator

ID_RANGE = (1000, 10000)  # a base world's ids (World.generate); created records start at 20001
TRIES = 30  # bounded retries for a fresh id or a fresh unique value
OWN_TEMPLATE = 0.5  # the share of extra records copied from a record the task touches (else any record)
KEEP_FIELD = 0.5  # the chance that an extra record keeps a (non-unique) field of the record it copies


@dataclass(frozen=True)
class WorldEdit:
    """One record of ``entity`` as the edited world holds it: a new record (``added``) or an existing one
    with one field drawn anew (``field``)."""

    entity: str
    record: Mapping[str, Any]
    added: bool
    field: str | None = None


@dataclass(frozen=True)
class WorldPerturbation:
    """The edits drawn for one episode (empty: the plain world)."""

    edits: tuple[WorldEdit, ...] = ()

    def apply(self, state: WorldState, suite: Suite) -> None:
        """Write the edits into ``state`` (an episode's overlay; the base world is untouched)."""
        for e in self.edits:
            state.put(e.entity, dict(e.record), suite.entities[e.entity].id_field)

    @property
    def added(self) -> int:
        return sum(e.added for e in self.edits)

    @property
    def changed(self) -> int:
        return sum(not e.added for e in self.edits)


def replay(task: TaskSpec, suite: Suite, state: WorldState) -> list[dict[str, Any]] | None:
    """The results of the task's required calls run in task order (a valid order: calls are numbered
    topologically, as the sampler instantiated them) with their own arguments on ``state``; ``None`` when
    one fails."""
    out = []
    for c in task.calls:
        try:
            out.append(suite.executor.run(suite.tools[c.tool], c.args, state))
        except ToolError:
            return None
    return out


def touched_ids(task: TaskSpec, results: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Every text value in the task's arguments and results: the ids of the records the task touches
    (and other values, harmlessly)."""
    out: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.add(value)
        elif isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)

    for c in task.calls:
        walk(c.args)
    for r in results:
        walk(r)
    return frozenset(out)


class _Drafter:
    """Draws one candidate edit at a time on the current edited state."""

    def __init__(self, task: TaskSpec, suite: Suite, state: WorldState, touched: frozenset[str],
                 rng: np.random.Generator) -> None:
        self.suite, self.state, self.touched, self.rng = suite, state, touched, rng
        entities = dict.fromkeys(suite.tools[t].entity for t in task.tools)
        self.entities = [e for e in entities if e in suite.entities and suite.entities[e].count > 0]

    def _value(self, entity: str, field_name: str, old: Any = None) -> tuple[bool, Any]:
        """A value for ``entity.field_name`` drawn as the world draws it (fresh when the field is unique,
        different from ``old`` when given); ``(False, None)`` when none is found within bounds."""
        ent = self.suite.entities[entity]
        spec = ent.field(field_name)
        draw = compile_generator(spec)
        tables = {spec.ref: self.state.ids(spec.ref)} if spec.ref else {}
        taken = {r.get(field_name) for r in self.state.records(entity)} if spec.unique else set()
        index = len(self.state.ids(entity))
        for _ in range(TRIES):
            value = draw(self.rng, self.suite.pools, index, tables)
            if value != old and value not in taken:
                return True, value
        return False, None

    def _fresh_id(self, entity: str) -> str | None:
        ent = self.suite.entities[entity]
        for _ in range(TRIES):
            rid = f"{ent.id_prefix}-{int(self.rng.integers(*ID_RANGE))}"
            if self.state.get(entity, rid) is None:
                return rid
        return None

    def added(self) -> WorldEdit | None:
        """A copy of a record of one of the episode's tables (the task's own records half of the time, so
        its searches may also return it) under a fresh id."""
        entity = self.entities[int(self.rng.integers(len(self.entities)))]
        ent = self.suite.entities[entity]
        records = self.state.record_list(entity)
        own = [r for r in records if r[ent.id_field] in self.touched]
        pool = own if own and self.rng.random() < OWN_TEMPLATE else records
        template = pool[int(self.rng.integers(len(pool)))]
        rid = self._fresh_id(entity)
        if rid is None:
            return None
        record: Record = {ent.id_field: rid}
        for f in ent.fields[1:]:
            if f.unique or self.rng.random() >= KEEP_FIELD:
                ok, value = self._value(entity, f.name)
                if not ok:
                    return None
                record[f.name] = value
            else:
                record[f.name] = template[f.name]
        return WorldEdit(entity, record, True)

    def changed(self) -> WorldEdit | None:
        """One field of a record the task never touches, drawn anew."""
        entity = self.entities[int(self.rng.integers(len(self.entities)))]
        ent = self.suite.entities[entity]
        others = [r for r in self.state.record_list(entity) if r[ent.id_field] not in self.touched]
        if not others or len(ent.fields) < 2:
            return None
        record = dict(others[int(self.rng.integers(len(others)))])
        field_name = ent.fields[1 + int(self.rng.integers(len(ent.fields) - 1))].name
        ok, value = self._value(entity, field_name, old=record[field_name])
        if not ok:
            return None
        record[field_name] = value
        return WorldEdit(entity, record, False, field_name)


def perturb_world(task: TaskSpec, suite: Suite, rng: np.random.Generator, n_edits: int) -> WorldPerturbation:
    """Up to ``n_edits`` edits of the task's world (each an extra record or a changed field, with even odds)
    after which every required call returns what it returns on the plain world; an edit that would change a
    result (or fail a call) is dropped."""
    if n_edits <= 0:
        return WorldPerturbation()
    world = suite.world(task.world_seed)
    plain = replay(task, suite, WorldState(world))
    if plain is None:  # the task does not run on its own world: leave it alone
        return WorldPerturbation()
    kept: list[WorldEdit] = []
    state = WorldState(world)
    drafter = _Drafter(task, suite, state, touched_ids(task, plain), rng)
    if not drafter.entities:
        return WorldPerturbation()
    for _ in range(n_edits):
        edit = drafter.added() if rng.random() < 0.5 else drafter.changed()
        if edit is None:
            continue
        trial = WorldState(world)
        WorldPerturbation((*kept, edit)).apply(trial, suite)
        if replay(task, suite, trial) == plain:
            kept.append(edit)
            WorldPerturbation((edit,)).apply(state, suite)
    return WorldPerturbation(tuple(kept))
