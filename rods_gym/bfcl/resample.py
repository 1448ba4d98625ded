"""RODS resampling of BFCL tasks at tier 0: the same calls and signature, new argument values.

A **span** is a ground-truth argument value the user states verbatim in the task's questions (a file name,
a user id, a stock symbol, an amount). A variant swaps spans for other values *valid in the task's initial
state*: the value's siblings in the involved classes' initial config (the other keys of its map or the same field of
the other records: the other files of a folder, other users, other tickets) of the same shape (file extension,
case, digit and space pattern), numbers redrawn at the same magnitude. The question
is rewritten by the template the spans define (each span's text replaced), the ground truth by the same
substitution. A variant is kept only when replaying its new ground truth on a fresh backend **verifies** it:
no call fails (no ``Error during execution``, no ``error`` field, each result of the parent's kind with the same
keys), every checked turn passes BFCL's rule, its signature equals the parent's, and it is not a copy of the
parent, of an earlier variant or of a task to avoid (the test split). Values that the user states in
another form (``Quasar Ltd.`` for the symbol ``QUAS``) or that come from earlier results are left alone.
"""

from __future__ import annotations

import dataclasses
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .backend import Backend
from .data import BFCLTask, Call, tasks_by_id
from .scoring import check_transcript
from .taskmodel import bfcl_signature

EXT = re.compile(r"\.[A-Za-z0-9]{1,5}$")


def shape(value: str) -> tuple:
    """What a replacement must share with a value: file extension, case, title case, digits only, e-mail, word
    count (1, 2, 3, more) and closing punctuation (a name stays a name, a sentence a sentence)."""
    ext = EXT.search(value)
    return (ext.group().lower() if ext else "", value.isupper(), value.istitle(), value.isdigit(), "@" in value,
            min(len(value.split()), 4), value[-1:] in ".!?")


def span_pattern(texts: "Sequence[str]") -> "re.Pattern[str]":
    """Occurrences of the texts as whole tokens (not inside a longer word: ``test`` is not in ``latest``)."""
    alts = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alts})(?![A-Za-z0-9_])")


def _is_map(d: dict) -> bool:
    """A dict of like values (records by id, names to ids): its keys are interchangeable."""
    if len(d) < 2:
        return False
    kinds = {type(v).__name__ if not isinstance(v, dict) else "dict" for v in d.values()}
    return len(kinds) == 1


def _groups(obj: Any, path: tuple, out: dict[tuple, set[str]]) -> None:
    """Strings of the config by generalized path (a map's keys and list indices read ``*``): the siblings of a
    value (the other files of its folder, the other users' ids, the other tickets' titles)."""
    if isinstance(obj, dict):
        is_map = _is_map(obj)
        for k, v in obj.items():
            out.setdefault(path + ("<key>",), set()).add(str(k))
            _groups(v, path + ("*" if is_map else str(k),), out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _groups(v, path + ("*",), out)
    elif isinstance(obj, str):
        out.setdefault(path, set()).add(obj)


def state_values(task: BFCLTask) -> dict[str, list[str]]:
    """For every string of the initial config, its siblings of the same :func:`shape` (sorted: a stable order)."""
    groups: dict[tuple, set[str]] = {}
    for cls in task.involved_classes:
        _groups(task.initial_config.get(cls, {}), (cls,), groups)
    out: dict[str, set[str]] = {}
    for members in groups.values():
        members = {m for m in members if 2 <= len(m) <= 60 and "\n" not in m}
        for m in members:
            out.setdefault(m, set()).update(x for x in members if x != m and shape(x) == shape(m))
    return {k: sorted(v) for k, v in out.items()}


def config_strings(task: BFCLTask) -> set[str]:
    groups: dict[tuple, set[str]] = {}
    for cls in task.involved_classes:
        _groups(task.initial_config.get(cls, {}), (cls,), groups)
    return set().union(*groups.values()) if groups else set()


@lru_cache(maxsize=1)
def global_names() -> dict[tuple, list[str]]:
    """Short strings (2-60 characters) of every task's initial config, by shape: fresh values for what a user
    invents (a new file or folder name, a message's text), which no sibling in the task's own state stands for."""
    out: dict[tuple, set[str]] = {}
    for task in tasks_by_id().values():
        for s in config_strings(task):
            if 2 <= len(s) <= 60 and "\n" not in s and not s.isdigit():
                out.setdefault(shape(s), set()).add(s)
    return {k: sorted(v) for k, v in out.items()}


@lru_cache(maxsize=None)
def _enums() -> dict[str, dict[str, tuple]]:
    from .data import FUNC_DOC_FILES, func_docs

    out: dict[str, dict[str, tuple]] = {}
    for cls in FUNC_DOC_FILES:
        for doc in func_docs(cls):
            for param, spec in doc["parameters"].get("properties", {}).items():
                if "enum" in spec:
                    out.setdefault(doc["name"], {})[param] = tuple(spec["enum"])
    return out


def enum_values(task: BFCLTask, value: Any) -> tuple:
    """The documented enum of the parameter(s) ``value`` is passed to, if any."""
    enums = _enums()
    for turn in task.ground_truth:
        for call in turn:
            for param, v in call.args.items():
                if v == value and param in enums.get(call.name, {}):
                    return enums[call.name][param]
    return ()


def spans(task: BFCLTask) -> list[Any]:
    """Ground-truth argument values stated verbatim in the questions (distinct, in call order)."""
    text = "\n".join(task.user_text(t) for t in range(task.n_turns))
    found: list[Any] = []
    for turn in task.ground_truth:
        for call in turn:
            for value in call.args.values():
                if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                    continue
                s = str(value)
                if len(s) >= 2 and value not in found and span_pattern([s]).search(text):
                    found.append(value)
    return found


def _new_number(value: int | float, rng: np.random.Generator) -> int | float:
    if isinstance(value, int):
        lo, hi = max(1, int(value * 0.5)), max(2, int(value * 1.5))
        return int(rng.integers(lo, hi + 1))
    decimals = len(str(value).split(".")[1]) if "." in str(value) else 0
    return round(float(value) * float(rng.uniform(0.5, 1.5)), decimals)


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
    questions = tuple(tuple({**m, "content": _rewrite(m["content"], mapping)} for m in turn) for turn in task.questions)
    gt = tuple(tuple(Call(c.name, {k: _substitute(v, mapping) for k, v in c.args.items()}) for c in turn)
               for turn in task.ground_truth)
    return dataclasses.replace(task, id=new_id, questions=questions, ground_truth=gt)


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
    tried: int
    verified: int


class BFCLResampler:
    """Tier-0 variants of BFCL tasks (see the module docstring). ``avoid``: tasks whose signature and argument
    set a variant must not reproduce (the test split: decontamination). Each span is first tried alone with up
    to ``probe`` sibling values; a variant then swaps a random non-empty subset of the swappable spans."""

    def __init__(self, avoid: Sequence[BFCLTask] = (), probe: int = 4, max_tries: int = 4) -> None:
        from .split import content_key

        self._content_key = content_key
        self.avoid = {content_key(t) for t in avoid}
        self.probe = probe
        self.max_tries = max_tries
        self.tried = 0
        self.verified = 0

    def _alternatives(self, task: BFCLTask, value: Any, pools: dict[str, list[str]], text: str,
                      rng: np.random.Generator) -> list[Any]:
        if isinstance(value, str):
            options = [s for s in pools.get(value, []) if s not in text]
            enum = enum_values(task, value)
            if enum:  # a documented enum (on/off, a unit...): the other members
                options = [e for e in enum if e != value and e not in text]
            elif not options and value not in pools:  # a value the user invents
                state = pools.keys()
                options = [s for s in global_names().get(shape(value), []) if s not in text and s not in state]
            order = rng.permutation(len(options))[: self.probe]
            return [options[int(k)] for k in order]
        out = []
        for _ in range(self.probe):
            new = _new_number(value, rng)
            if new != value and str(new) not in text and new not in out:
                out.append(new)
        return out

    def _check(self, parent: BFCLTask, variant: BFCLTask, trace: list, seen: set) -> bool:
        self.tried += 1
        key = self._content_key(variant)
        if key in seen or key in self.avoid or not verify(parent, variant, trace):
            return False
        seen.add(key)
        return True

    def resample(self, task: BFCLTask, n: int, rng: np.random.Generator) -> list[BFCLTask]:
        """Up to ``n`` verified, distinct variants of ``task`` (ids ``<task id>.v<k>``)."""
        pools = state_values(task)
        text = "\n".join(task.user_text(t) for t in range(task.n_turns))
        trace = _trace(task)
        seen = {self._content_key(task)}
        out: list[BFCLTask] = []
        swappable: dict[Any, list[Any]] = {}
        for value in spans(task):  # probe each span alone; a verified probe is a variant too
            for new in self._alternatives(task, value, pools, text, rng):
                variant = apply(task, {value: new}, f"{task.id}.v{len(out)}")
                if self._check(task, variant, trace, seen):
                    swappable.setdefault(value, []).append(new)
                    if len(out) < n:
                        out.append(variant)
                        self.verified += 1
        if not swappable:
            return out
        keys = list(swappable)
        for _ in range(n * self.max_tries):
            if len(out) >= n or len(keys) < 2:
                break
            chosen = [k for k in keys if rng.random() < 0.5] or [keys[int(rng.integers(len(keys)))]]
            mapping = {k: swappable[k][int(rng.integers(len(swappable[k])))] for k in chosen}
            if len({str(v) for v in mapping.values()}) < len(mapping):
                continue
            variant = apply(task, mapping, f"{task.id}.v{len(out)}")
            if self._check(task, variant, trace, seen):
                out.append(variant)
                self.verified += 1
        return out

    def stats(self) -> ResampleStats:
        return ResampleStats(self.tried, self.verified)


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
