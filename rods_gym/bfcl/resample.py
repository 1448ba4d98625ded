"""RODS resampling of BFCL tasks at tier 0: the same calls and signature, new argument values.

A **span** is a ground-truth argument value the user states verbatim in the task's questions (a file name,
a user id, a stock symbol, an amount). A variant swaps spans for other values **of the kind their parameter
takes** (the typed rule, :mod:`rods_gym.bfcl.valuekinds`): another existing file of the directory where the call
runs, another ticker of the market, another airport, user id or ticket id of the backend's state, another member
of a documented enum, a text from the pool of BFCL's texts of that field, a number at the same magnitude; never a
value of another parameter, and never a credential or a label no pool holds. The question is rewritten by the
template the spans define (each span's text replaced), the ground truth by the same substitution.

A variant is kept only when

1. replaying its new ground truth on a fresh backend **verifies** it: no call fails (no ``Error during
   execution``, no ``error`` field, each result of the parent's kind with the same keys), every checked turn
   passes BFCL's rule, its signature equals the parent's;
2. **every swapped value matters** (the parent-fails rule): the variant's ground truth with any one swapped value
   put back to the parent's does not pass the variant under the env's checker
   (:func:`rods_gym.bfcl.scoring.check_transcript`: state and results turn by turn). With one swapped value this is
   "the parent's ground truth fails the variant"; a value the backend neither stores nor returns
   (``purchase_insurance.insurance_type``) can never pass it;
3. it is not a copy of the parent, of an earlier variant or of a task to avoid (the test split).

Values that the user states in another form (``Quasar Ltd.`` for the symbol ``QUAS``) or that come from earlier
results are left alone.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .backend import Backend
from .data import BFCLTask, Call, tasks_by_id
from .scoring import check_transcript
from .taskmodel import bfcl_signature
from .valuekinds import Slot, config_pools, draw, slots


def span_pattern(texts: "Sequence[str]") -> "re.Pattern[str]":
    """Occurrences of the texts as whole tokens (not inside a longer word: ``test`` is not in ``latest``)."""
    alts = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alts})(?![A-Za-z0-9_])")


def spans(task: BFCLTask) -> list[Any]:
    """Ground-truth argument values stated verbatim in the questions (distinct, in call order): numbers of two or
    more digits, strings of three or more characters (a two-letter word such as the headlights' mode ``on`` is
    too common to stand for the value: the rewrite would replace it wherever the question says it)."""
    text = "\n".join(task.user_text(t) for t in range(task.n_turns))
    found: list[Any] = []
    for turn in task.ground_truth:
        for call in turn:
            for value in call.args.values():
                if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                    continue
                s = str(value)
                if len(s) >= (3 if isinstance(value, str) else 2) and value not in found and span_pattern([s]).search(text):
                    found.append(value)
    return found


def _substitute(value: Any, mapping: dict[Any, Any]) -> Any:
    if isinstance(value, list):
        return [_substitute(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, mapping) for k, v in value.items()}
    if not isinstance(value, bool) and isinstance(value, (str, int, float)) and value in mapping \
            and type(mapping[value]) is type(value):
        return mapping[value]
    return value


def _rewrite(text: str, mapping: dict[Any, Any]) -> str:
    """The question template filled with the new values: each span's text replaced (longest first, one pass)."""
    if not mapping:
        return text
    table = {str(k): str(v) for k, v in mapping.items()}
    return span_pattern(list(table)).sub(lambda m: table[m.group()], text)


def apply(task: BFCLTask, mapping: dict[Any, Any], new_id: str) -> BFCLTask:
    """The variant of ``task`` that swaps ``mapping``'s values: questions rewritten, ground truth substituted."""
    questions = tuple(tuple({**m, "content": _rewrite(m["content"], mapping)} for m in turn) for turn in task.questions)
    return dataclasses.replace(task, id=new_id, questions=questions, ground_truth=_ground_truth(task, mapping))


def changes(parent: BFCLTask, variant: BFCLTask) -> dict[Any, Any]:
    """The swap a variant made: parent value -> new value, read off the two ground truths argument by argument
    (first occurrence). Raises ValueError if the two do not have the same calls and parameters."""
    out: dict[Any, Any] = {}
    if [[(c.name, tuple(c.args)) for c in t] for t in parent.ground_truth] != \
            [[(c.name, tuple(c.args)) for c in t] for t in variant.ground_truth]:
        raise ValueError(f"{variant.id} does not have the calls and parameters of {parent.id}")
    for turn_p, turn_v in zip(parent.ground_truth, variant.ground_truth):
        for cp, cv in zip(turn_p, turn_v):
            for k, old in cp.args.items():
                new = cv.args[k]
                if old != new and not isinstance(old, (list, dict)) and old not in out:
                    out[old] = new
    return out


def _ground_truth(task: BFCLTask, mapping: Mapping[Any, Any]) -> tuple[tuple[Call, ...], ...]:
    return tuple(tuple(Call(c.name, {k: _substitute(v, dict(mapping)) for k, v in c.args.items()}) for c in turn)
                 for turn in task.ground_truth)


def parent_fails(parent: BFCLTask, variant: BFCLTask, mapping: Mapping[Any, Any]) -> bool:
    """The parent-fails rule (module docstring, 2): for every swapped value, the variant's ground truth with that
    value put back fails the variant under the env's checker; so the parent's own ground truth fails it."""
    for key in mapping:
        rest = {k: v for k, v in mapping.items() if k != key}
        if check_transcript(variant, _ground_truth(parent, rest)).success:
            return False
    return True


def _result_shape(text: str) -> tuple:
    if text.startswith("Error during execution"):
        return ("failed",)
    try:
        obj = json.loads(text)
    except ValueError:
        return ("text",)
    if isinstance(obj, dict):
        return ("dict", tuple(sorted(obj)))
    return (type(obj).__name__,)


def _trace(task: BFCLTask) -> list[tuple]:
    """Per ground-truth call, the shape of its result (failed, text, or a dict's keys)."""
    backend = Backend(task)
    return [_result_shape(backend.execute(c.name, c.args)) for turn in task.ground_truth for c in turn]


def verify(parent: BFCLTask, variant: BFCLTask, parent_trace: list | None = None) -> bool:
    """Whether the variant's new ground truth replays as the parent's does (see the module docstring)."""
    trace = _trace(variant)
    if trace != (parent_trace if parent_trace is not None else _trace(parent)):
        return False
    if any(s == ("failed",) or (s[0] == "dict" and "error" in s[1]) for s in trace):
        return False
    if not check_transcript(variant, variant.ground_truth).success:
        return False
    return bfcl_signature(variant) == bfcl_signature(parent)


@dataclasses.dataclass(frozen=True)
class ResampleStats:
    """Candidates tried (``tried`` = ``duplicate`` + ``replay_failed`` + ``parent_passes`` + ``passed``: rejected as
    a copy or a task to avoid, by the replay, by the parent-fails rule, or passing all three), variants returned
    (``verified``: passing ones, up to ``n`` per parent); ``typed_slots`` of ``spans``: stated values with a
    swappable kind, of all stated values."""

    tried: int
    verified: int
    passed: int = 0
    duplicate: int = 0
    replay_failed: int = 0
    parent_passes: int = 0
    spans: int = 0
    typed_slots: int = 0


class BFCLResampler:
    """Tier-0 variants of BFCL tasks (see the module docstring). ``avoid``: tasks whose signature and argument
    set a variant must not reproduce (the test split: decontamination), whose configs the typed pools also leave
    out. Each typed span is first tried alone with up to ``probe`` values of its kind; a variant then swaps a
    random non-empty subset of the spans that had a kept probe. ``parent_fails=False`` turns the parent-fails rule
    off (an ablation: to count what it removes)."""

    def __init__(self, avoid: Sequence[BFCLTask] = (), probe: int = 4, max_tries: int = 4,
                 parent_fails: bool = True) -> None:
        from .split import content_key

        self._content_key = content_key
        self.avoid = {content_key(t) for t in avoid}
        self.pools = config_pools(frozenset(t.id for t in avoid))
        self.probe = probe
        self.max_tries = max_tries
        self.parent_fails = parent_fails
        self.counts = {f.name: 0 for f in dataclasses.fields(ResampleStats)}

    def slots(self, task: BFCLTask, stated: Sequence[Any] | None = None) -> dict[Any, Slot]:
        """The task's stated values (``stated``, default :func:`spans`) with a swappable kind
        (:func:`rods_gym.bfcl.valuekinds.slots`)."""
        return slots(task, spans(task) if stated is None else stated, self.pools)

    def _check(self, parent: BFCLTask, variant: BFCLTask, mapping: Mapping[Any, Any], trace: list,
               seen: set) -> bool:
        self.counts["tried"] += 1
        key = self._content_key(variant)
        if key in seen or key in self.avoid:
            self.counts["duplicate"] += 1
            return False
        if not verify(parent, variant, trace):
            self.counts["replay_failed"] += 1
            return False
        if self.parent_fails and not parent_fails(parent, variant, mapping):
            self.counts["parent_passes"] += 1
            return False
        self.counts["passed"] += 1
        seen.add(key)
        return True

    def resample(self, task: BFCLTask, n: int, rng: np.random.Generator) -> list[BFCLTask]:
        """Up to ``n`` verified, distinct variants of ``task`` (ids ``<task id>.v<k>``)."""
        text = "\n".join(task.user_text(t) for t in range(task.n_turns))
        stated = spans(task)
        typed = self.slots(task, stated)
        self.counts["spans"] += len(stated)
        self.counts["typed_slots"] += len(typed)
        trace = _trace(task)
        seen = {self._content_key(task)}
        out: list[BFCLTask] = []
        swappable: dict[Any, list[Any]] = {}
        for value, slot in typed.items():  # probe each span alone; a kept probe is a variant too
            for new in draw(slot, self.probe, rng, text):
                variant = apply(task, {value: new}, f"{task.id}.v{len(out)}")
                if self._check(task, variant, {value: new}, trace, seen):
                    swappable.setdefault(value, []).append(new)
                    if len(out) < n:
                        out.append(variant)
                        self.counts["verified"] += 1
        keys = list(swappable)
        for _ in range(n * self.max_tries):
            if len(out) >= n or len(keys) < 2:
                break
            chosen = [k for k in keys if rng.random() < 0.5] or [keys[int(rng.integers(len(keys)))]]
            mapping = {k: swappable[k][int(rng.integers(len(swappable[k])))] for k in chosen}
            if len({str(v) for v in mapping.values()}) < len(mapping):
                continue
            variant = apply(task, mapping, f"{task.id}.v{len(out)}")
            if self._check(task, variant, mapping, trace, seen):
                out.append(variant)
                self.counts["verified"] += 1
        return out

    def stats(self) -> ResampleStats:
        return ResampleStats(**self.counts)

    # the two counters a trainer's checkpoint keeps (rods_gym.bfcl.trainer.BFCLRodsSource.state_dict)
    @property
    def tried(self) -> int:
        return self.counts["tried"]

    @tried.setter
    def tried(self, value: int) -> None:
        self.counts["tried"] = int(value)

    @property
    def verified(self) -> int:
        return self.counts["verified"]

    @verified.setter
    def verified(self, value: int) -> None:
        self.counts["verified"] = int(value)


def variant_to_dict(task: BFCLTask, parent_id: str) -> dict[str, Any]:
    """A variant as a JSON line: its parent's id, its questions and ground truth (BFCL's call strings)."""
    return {"id": task.id, "parent": parent_id, "question": [list(map(dict, t)) for t in task.questions],
            "ground_truth": task.ground_truth_strings()}


def variant_from_dict(row: dict[str, Any]) -> BFCLTask:
    from .data import param_names, parse_call

    parent = tasks_by_id().get(row.get("parent", ""))
    if parent is None:
        raise KeyError(f"variant {row.get('id')!r}: unknown parent task {row.get('parent')!r}")
    params = param_names()
    questions = tuple(tuple(dict(m) for m in turn) for turn in row["question"])
    gt = tuple(tuple(parse_call(s, params) for s in turn) for turn in row["ground_truth"])
    if len(questions) != parent.n_turns or len(gt) != parent.n_turns:
        raise ValueError(f"variant {row['id']!r} has {len(questions)} turns; its parent has {parent.n_turns}")
    return dataclasses.replace(parent, id=row["id"], questions=questions, ground_truth=gt)


def read_variants(path: str | Path) -> list[BFCLTask]:
    with Path(path).open(encoding="utf-8") as f:
        return [variant_from_dict(json.loads(line)) for line in f if line.strip()]
