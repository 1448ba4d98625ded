"""Slips for recovery demonstrations: the oracle's call with one argument taken from the wrong slot.

Oracle demonstrations never contain a rejected call, so a policy trained only on them has never
seen the state its own mistakes lead to (the error observation) nor what to do there. A
demonstration with a slip first shows the call the policy typically gets wrong — one argument
holding a neighbouring value of the episode's slot table, the off-by-one choice a small
policy makes when it finds values by position — then the environment's rejection, then the
oracle's call. The slip and the rejection are context (no loss); the oracle's call after
them is what the policy imitates.
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
    the other slots within ``NEIGHBOURHOOD`` of it, else among all other slots. ``None`` when
    no argument can slip (no argument has a slot, or the table holds no other value).
    """
    keys = [value_key(v) for v in values]
    slotted = [p for p, v in call.arguments.items() if value_key(v) in keys]
    if not slotted:
        return None
    param = slotted[int(rng.integers(0, len(slotted)))]
    right = keys.index(value_key(call.arguments[param]))
    others = [k for k in range(len(values)) if keys[k] != keys[right]]
    if not others:
        return None
    near = [k for k in others if abs(k - right) <= NEIGHBOURHOOD]
    pool = near or others
    wrong = pool[int(rng.integers(0, len(pool)))]
    return ToolCall(call.name, {**call.arguments, param: values[wrong]})
