"""Slips for recovery demonstrations: the oracle's call with one argument taken from the wrong slot.

Oracle demonstrations never contain a rejected call, so a policy trained only on them has never
seen the state its own mistakes lead to (the error observation) nor what to do there. A
demonstration with a slip first shows a call with one argument holding a neighbouring value of
the episode's slot table (the slot a small policy that finds values by position picks by mistake;
most such slips fail the parameter's type check, some name an entity that does not exist), then
the environment's rejection, then the oracle's call. The slip and the rejection are context (no
loss); the oracle's call after them is what the policy imitates. Neighbours are taken in the slot
table's order (order of appearance), which is the shown ids' order in the compact view's default
``slot_ids="ordered"``, not under ``"shuffled"``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rods_gym.episode import ToolCall
from rods_gym.renderers.base import value_key

NEIGHBOURHOOD = 2  # a slip takes a value at most this many slots away from the right one, when there is one


def slipped_call(call: ToolCall, values: Sequence[Any], rng: np.random.Generator) -> ToolCall | None:
    """``call`` with one argument replaced by another value of ``values`` (the slot table, in slot order).

    The argument is drawn uniformly among those whose value has a slot; the replacement among
    the other slots within ``NEIGHBOURHOOD`` of it (a slot table holds distinct values). ``None``
    when no argument can slip (no argument has a slot, or the table holds no other value).
    """
    keys = [value_key(v) for v in values]
    slotted = [p for p, v in call.arguments.items() if value_key(v) in keys]
    if not slotted:
        return None
    param = slotted[int(rng.integers(0, len(slotted)))]
    right = keys.index(value_key(call.arguments[param]))
    near = [k for k in range(len(values)) if k != right and abs(k - right) <= NEIGHBOURHOOD]
    if not near:
        return None
    wrong = near[int(rng.integers(0, len(near)))]
    return ToolCall(call.name, {**call.arguments, param: values[wrong]})
