"""Task identity keys: when two tasks are the same task, and when a task is too close to a held-out one.

* :func:`content_key`: the same calls (tools, turns, arguments), dependencies, answer, withheld facts and locked
  tools (not the id, world seed, wording or distractors); :class:`TaskIndex` keys a growing set by it
  (deduplication in O(1): the resampler, RODS's seen-content set, ``rods synth``).
* :func:`binding_key`: the signature with its bindings (which tools sit where; with ``values`` also the concrete
  arguments); :class:`Decontaminator` rejects a task whose binding or instruction n-grams repeat a held-out one's.

The task-set builder keeps its splits apart by a third key, :func:`rods_gym.tasksets.split_key` (the WL hash of
the signature plus the concrete calls), with which the checked-in sets were built.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence

from .task import TaskSpec


def content_key(task: TaskSpec) -> bytes:
    """What makes two tasks the same task: calls with their tools, turns and arguments, the
    dependencies, the answer, the withheld facts and the locked tools (not the id, the world
    seed, the wording or the distractors)."""
    body = (
        tuple((c.tool, c.turn, tuple(sorted(c.args.items()))) for c in task.calls),
        tuple(sorted((d.src, d.dst, d.param, d.field) for d in task.deps)),
        None if task.answer is None else (task.answer.call, task.answer.field, task.answer.value),
        tuple((tuple(sorted(t.withheld)), tuple(sorted(t.locked))) for t in task.turns),
    )
    return hashlib.blake2b(repr(body).encode(), digest_size=16).digest()


def call_flags(task: TaskSpec) -> list[tuple[bool, bool, bool]]:
    """Per call (in order): a fact of it is withheld, its tool is locked in its turn, the answer is read from it."""
    asked = {cid for t in task.turns for cid, _ in t.withheld}
    locked = {(i, tool) for i, t in enumerate(task.turns) for tool in t.locked}
    answer = None if task.answer is None else task.answer.call
    return [(c.id in asked, (c.turn, c.tool) in locked, c.id == answer) for c in task.calls]


def binding_key(task: TaskSpec, values: bool = True) -> tuple:
    """A task's signature with its bindings: calls as ``(tool, turn, asked, locked, answer)``
    (plus their arguments when ``values``) and dependencies as ``(src tool, dst tool, param)``.
    Equal keys mean the same signature on the same tools (and, with ``values``, the same
    concrete calls, which is how the task-set builder keeps splits apart)."""
    pos = {c.id: i for i, c in enumerate(task.calls)}
    args = [tuple(sorted(c.args.items())) for c in task.calls] if values else None
    return binding_from_parts(len(task.turns), [c.tool for c in task.calls], [c.turn for c in task.calls], call_flags(task),
                    [(pos[d.src], pos[d.dst], d.param) for d in task.deps], args)


def binding_from_parts(n_turns: int, tools: Sequence[str], turns: Sequence[int], flags: Sequence[tuple[bool, bool, bool]],
             deps: Iterable[tuple[int, int, str]], args: Sequence[tuple] | None = None) -> tuple:
    if args is None:
        nodes = sorted((t, turn, *f) for t, turn, f in zip(tools, turns, flags))
    else:
        nodes = sorted((t, turn, *f, a) for t, turn, f, a in zip(tools, turns, flags, args))
    edges = sorted((tools[s], tools[d], p) for s, d, p in deps)
    return n_turns, tuple(map(repr, nodes)), tuple(edges)


_WORD = re.compile(r"[a-z0-9]+(?:[-.@+:][a-z0-9]+)*")


def instruction_ngrams(task: TaskSpec, n: int) -> set[tuple[str, ...]]:
    """Lower-cased word ``n``-grams of the task's user messages."""
    words = _WORD.findall(" ".join(t.message for t in task.turns).lower())
    return set(zip(*(words[i:] for i in range(n))))


class TaskIndex(Collection[TaskSpec]):
    """Tasks keyed by :func:`content_key`: ``task in index`` holds for any task with the same
    content, whatever its id, world seed or wording. Pass one as ``exclude`` to
    :meth:`Resampler.resample` to deduplicate against a large, growing set in O(1)."""

    def __init__(self, tasks: Iterable[TaskSpec] = ()) -> None:
        self._keys: set[bytes] = set()
        self._tasks: list[TaskSpec] = []
        for t in tasks:
            self.add(t)

    def add(self, task: TaskSpec) -> bool:
        """Add ``task``; return False (and keep the set unchanged) if its content is already in."""
        key = content_key(task)
        if key in self._keys:
            return False
        self._keys.add(key)
        self._remember(task)
        return True

    def _remember(self, task: TaskSpec) -> None:
        self._tasks.append(task)

    def has_key(self, key: bytes) -> bool:
        return key in self._keys

    def __contains__(self, task: object) -> bool:
        return isinstance(task, TaskSpec) and content_key(task) in self._keys

    def __iter__(self) -> Iterator[TaskSpec]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._keys)


class Decontaminator:
    """Rejects tasks too close to held-out ones (dev, test, OOD).

    A task is contaminated when a held-out task has the same signature with the same
    bindings (:func:`binding_key`; ``level="calls"``: the same concrete calls, tools and
    arguments, as the task-set builder; ``level="tools"``: the same tools, whatever the
    values), or when more than ``max_overlap`` of its instruction's word ``n``-grams occur
    in a single held-out instruction. ``n``-grams found in more than ``common`` held-out
    instructions are template boilerplate and never count. (Calibration on the built-in
    suite: two independent sampler tasks share a median 0.21 and a 99th percentile 0.78
    of their 8-grams, so 0.8 flags only near copies.)
    """

    LEVELS = ("calls", "tools")

    def __init__(self, tasks: Iterable[TaskSpec] = (), n: int = 8, max_overlap: float = 0.8, common: int = 25,
                 level: str = "calls") -> None:
        if n < 1 or not 0.0 < max_overlap <= 1.0 or common < 1:
            raise ValueError("Decontaminator: need n >= 1, 0 < max_overlap <= 1 and common >= 1, "
                             f"got {n}, {max_overlap}, {common}")
        if level not in self.LEVELS:
            raise ValueError(f"Decontaminator: level must be one of {self.LEVELS}, got {level!r}")
        self.n, self.max_overlap, self.level = n, max_overlap, level
        self.values = level == "calls"
        self.bindings: set[tuple] = set()
        postings: dict[tuple[str, ...], list[int]] = {}
        size = 0
        for j, t in enumerate(tasks):
            self.bindings.add(binding_key(t, self.values))
            for g in instruction_ngrams(t, n):
                postings.setdefault(g, []).append(j)
            size = j + 1
        self.size = size
        self.postings = {g: tuple(js) for g, js in postings.items() if len(js) <= common}

    def __len__(self) -> int:
        return self.size

    def check(self, task: TaskSpec) -> str | None:
        """``"binding"`` or ``"ngram"`` when ``task`` is contaminated, else ``None``."""
        if binding_key(task, self.values) in self.bindings:
            return "binding"
        if self.postings:
            grams = instruction_ngrams(task, self.n)
            if grams:
                get = self.postings.get
                counts = Counter(itertools.chain.from_iterable(get(g, ()) for g in grams))
                if counts and max(counts.values()) > self.max_overlap * len(grams):
                    return "ngram"
        return None
