"""A fresh set of BFCL backend instances per episode, executing calls as BFCL's ``execute_multi_turn_func_call``.

BFCL evaluates call strings with ``eval`` on instances kept in its module's ``globals()``; here each
:class:`Backend` owns its instances and calls the bound methods directly, with BFCL's result formatting (a
``str`` as is, a ``dict`` as JSON, anything else ``str()``), its refusals and its error text
(``Error during execution: ...``), so the results, and so BFCL's response check, are the same.
Only ``bfcl_eval.eval_checker.multi_turn_eval.func_source_code.<module>`` is imported, on first use of a class.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from functools import lru_cache
from typing import Any, Mapping, Protocol, Sequence

from . import INSTALL_HINT


class TaskLike(Protocol):
    """What a backend needs of a task (:class:`rods_gym.bfcl.data.BFCLTask`; no import: data imports this module)."""

    involved_classes: tuple[str, ...]
    initial_config: Mapping[str, Any]

    @property
    def long_context(self) -> bool: ...

BACKEND_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS_CLASSES = frozenset({"MathAPI"})
# names BFCL refuses to run (multi_turn_utils.execute_multi_turn_func_call)
FORBIDDEN = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})


@lru_cache(maxsize=None)
def backend_class(class_name: str) -> type:
    """The backend class, its module imported on first use."""
    module_name = CLASS_MODULES.get(class_name)
    if module_name is None:
        raise KeyError(f"unknown BFCL class {class_name!r}; the multi-turn classes are {sorted(CLASS_MODULES)}")
    try:
        module = importlib.import_module(f"{BACKEND_PREFIX}.{module_name}")
    except ImportError as exc:
        raise ImportError(f"cannot import BFCL backend {class_name} ({exc}); {INSTALL_HINT}") from exc
    return getattr(module, class_name)


@lru_cache(maxsize=None)
def mutable_defaults(class_name: str) -> dict[str, dict[str, Any]]:
    """Method name -> its parameters whose default is a list or dict. ``TwitterAPI.post_tweet`` has
    ``tags=[]``/``mentions=[]`` and ``mention`` extends a tweet's list in place, so in one process the shared
    default grows from episode to episode (tasks 90 and 147 of every category then replay differently the
    second time, also in BFCL's own checker). Each call here gets fresh copies: what a fresh process gives."""
    cls = backend_class(class_name)
    out: dict[str, dict[str, Any]] = {}
    for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
        found = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                 if isinstance(p.default, (list, dict))}
        if found and not name.startswith("_"):
            out[name] = found
    return out


@lru_cache(maxsize=None)
def method_params(class_name: str) -> dict[str, tuple[str, ...]]:
    """Public method name -> parameter names, of one backend class."""
    cls = backend_class(class_name)
    out = {}
    for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
        if not name.startswith("_"):
            out[name] = tuple(p for p in inspect.signature(fn).parameters if p != "self")
    return out


def format_result(result: Any) -> str:
    """BFCL's text of a call's return value."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def public_state(instance: Any) -> dict[str, Any]:
    """The attributes BFCL's state check compares (those not starting with ``_``)."""
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


class Backend:
    """The involved classes of one task, loaded from its initial config (deep-copied: the task is unchanged)."""

    __slots__ = ("instances", "methods", "defaults")

    def __init__(self, task: TaskLike, initial_config: Mapping[str, Any] | None = None) -> None:
        config = task.initial_config if initial_config is None else initial_config
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        self.defaults: dict[str, dict[str, Any]] = {}
        for class_name in task.involved_classes:
            instance = backend_class(class_name)()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(config.get(class_name, {})), long_context=task.long_context)
                if task.long_context:  # TravelAPI adds long_context's module-level card and booking dicts by
                    # reference: a charge to one changed it in every backend (the ground truth's too) and every
                    # later episode of the process. Own copies, as a fresh process has.
                    for attr, value in public_state(instance).items():
                        if isinstance(value, (dict, list)):
                            setattr(instance, attr, copy.deepcopy(value))
            self.instances[class_name] = instance
            defaults = mutable_defaults(class_name)
            for name in method_params(class_name):  # a later class's method of the same name wins, as in BFCL
                self.methods[name] = getattr(instance, name)
                if name in defaults:
                    self.defaults[name] = defaults[name]
                else:
                    self.defaults.pop(name, None)

    def execute(self, name: str, args: Mapping[str, Any]) -> str:
        """Run one call; the result text, or BFCL's ``Error during execution: ...`` text. Never raises
        (an argument that is not a Python identifier is an error, as BFCL's ``eval`` makes it)."""
        if name in FORBIDDEN:
            return f"Error during execution: Function call {name} is not allowed."
        method = self.methods.get(name)
        if method is None:
            return f"Error during execution: name '{name}' is not defined"
        bad = [k for k in args if not (isinstance(k, str) and k.isidentifier())]
        if bad:
            return f"Error during execution: invalid syntax (argument name {bad[0]!r})"
        if any(type(v) is list or type(v) is dict for v in args.values()):
            # the backends keep argument lists (post_tweet stores ``mentions``, mention() extends it): BFCL's eval
            # builds them anew from the call's text each time, so must we, or the caller's (the task's) data changes
            args = copy.deepcopy(dict(args))
        fresh = self.defaults.get(name)
        if fresh:
            args = {**{p: copy.deepcopy(d) for p, d in fresh.items() if p not in args}, **args}
        try:
            return format_result(method(**args))
        except Exception as exc:  # noqa: BLE001 - BFCL reports every failure of a call as its result
            return f"Error during execution: {exc}"

    def run(self, calls: Sequence[Any]) -> list[str]:
        """Run :class:`rods_gym.bfcl.data.Call` objects in order; their result texts."""
        return [self.execute(c.name, c.args) for c in calls]

    def same_state(self, other: "Backend") -> bool:
        """BFCL's state check: every public attribute of ``other``'s instances (the ground truth) equal here."""
        for class_name, gt in other.instances.items():
            mine = self.instances[class_name]
            for attr, value in vars(gt).items():
                if not attr.startswith("_") and getattr(mine, attr, _MISSING) != value:
                    return False
        return True


_MISSING = object()
