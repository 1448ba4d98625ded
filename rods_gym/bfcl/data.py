"""BFCL-V3 multi-turn data read from the installed ``bfcl-eval`` wheel: tasks, ground truth, function docs.

Only the JSON files are read (see the package docstring for why no ``bfcl_eval`` module is imported here).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from . import CATEGORIES, INSTALL_HINT
FILE_PREFIX = "BFCL_v4_multi_turn_"
# classes of the four multi-turn categories -> their function-doc file (bfcl_eval.constants.executable_backend_config)
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
# BFCL's message when the missing function is revealed (bfcl_eval.constants.default_prompts)
REVEAL_MESSAGE = "I have updated some more functions you can choose from. What about now?"


def bfcl_available() -> bool:
    """Whether ``bfcl-eval`` is installed (found without importing it)."""
    return importlib.util.find_spec("bfcl_eval") is not None


@lru_cache(maxsize=1)
def data_dir() -> Path:
    """``bfcl_eval/data`` of the installed package; an ImportError naming the install command if absent."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the BFCL environments need the bfcl-eval package: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not (path / f"{FILE_PREFIX}base.json").is_file():
        raise ImportError(f"bfcl-eval at {path.parent} has no multi-turn data files; reinstall it: {INSTALL_HINT}")
    return path


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass(frozen=True)
class Call:
    """One function call: name and keyword arguments (positional ones named by the backend's signature)."""

    name: str
    args: Mapping[str, Any]

    def to_bfcl(self) -> str:
        """The call as BFCL's decoded model output writes it (``name(k=repr(v),...)``)."""
        return f"{self.name}({','.join(f'{k}={v!r}' for k, v in self.args.items())})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.args)}


@dataclass(frozen=True)
class BFCLTask:
    """One BFCL multi-turn entry with its ground truth.

    ``questions[t]`` is turn ``t``'s user messages (empty where the missing function is revealed);
    ``ground_truth[t]`` the calls of turn ``t`` (empty where the agent should not call: the missing
    parameter's or function's turn); ``missed_function`` maps a turn to the function names revealed then.
    ``initial_config`` is BFCL's JSON (treat as read-only: the backend deep-copies it).
    """

    id: str
    category: str
    questions: tuple[tuple[Mapping[str, str], ...], ...]
    initial_config: Mapping[str, Any]
    involved_classes: tuple[str, ...]
    ground_truth: tuple[tuple[Call, ...], ...]
    missed_function: Mapping[int, tuple[str, ...]]
    path: tuple[str, ...] = ()

    def __hash__(self) -> int:  # by id (the mappings are not hashable); equality still compares every field
        return hash(self.id)

    @property
    def index(self) -> int:
        """The entry's number; entry ``i`` of every category derives from ``multi_turn_base_i`` (a resampled
        variant, ``<parent id>.v<k>``, has its parent's)."""
        return int(self.id.rsplit("_", 1)[1].split(".", 1)[0])

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"

    @property
    def n_turns(self) -> int:
        return len(self.questions)

    def user_text(self, turn: int) -> str:
        """What the user says at the start of ``turn`` (BFCL's reveal message on a reveal turn)."""
        msgs = self.questions[turn]
        if not msgs:
            return REVEAL_MESSAGE
        return "\n".join(m["content"] for m in msgs)

    def to_bfcl_entry(self) -> dict[str, Any]:
        """The entry as BFCL's checker takes it (``test_entry``)."""
        return {"id": self.id, "initial_config": copy.deepcopy(dict(self.initial_config)),
                "involved_classes": list(self.involved_classes)}

    def ground_truth_strings(self) -> list[list[str]]:
        return [[c.to_bfcl() for c in turn] for turn in self.ground_truth]


def parse_call(text: str, params: Mapping[str, tuple[str, ...]]) -> Call:
    """A ground-truth call string (``mv(source='a', destination='b')``) as a :class:`Call`; ``params`` maps a
    function name to its parameter names, used for positional arguments. Arguments must be literals."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"ground-truth call {text!r} is not a Python call: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"ground-truth call {text!r} is not a plain function call")
    name = node.func.id
    args: dict[str, Any] = {}
    if node.args:
        names = params.get(name)
        if names is None or len(names) < len(node.args):
            raise ValueError(f"ground-truth call {text!r}: no parameter names for its positional arguments")
        for pname, value in zip(names, node.args):
            args[pname] = ast.literal_eval(value)
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"ground-truth call {text!r} uses **kwargs")
        args[kw.arg] = ast.literal_eval(kw.value)
    return Call(name, args)


@lru_cache(maxsize=None)
def func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function docs of one backend class (its ``multi_turn_func_doc`` file)."""
    if class_name not in FUNC_DOC_FILES:
        raise KeyError(f"unknown BFCL class {class_name!r}; the multi-turn classes are {sorted(FUNC_DOC_FILES)}")
    return tuple(_jsonl(data_dir() / "multi_turn_func_doc" / FUNC_DOC_FILES[class_name]))


@lru_cache(maxsize=None)
def param_names() -> dict[str, tuple[str, ...]]:
    """Every backend method's parameter names in its signature's order (for positional ground-truth arguments;
    the docs' order differs, e.g. ``purchase_insurance``)."""
    from .backend import method_params  # the backend modules: light (standard library and mpmath)

    out: dict[str, tuple[str, ...]] = {}
    for cls in FUNC_DOC_FILES:
        out.update(method_params(cls))
    return out


def _task(entry: dict[str, Any], answer: dict[str, Any], category: str) -> BFCLTask:
    if entry["id"] != answer["id"]:
        raise ValueError(f"BFCL data out of order: question {entry['id']} beside answer {answer['id']}")
    params = param_names()
    gt = tuple(tuple(parse_call(s, params) for s in turn) for turn in answer["ground_truth"])
    questions = tuple(tuple(dict(m) for m in turn) for turn in entry["question"])
    if len(gt) != len(questions):
        raise ValueError(f"{entry['id']}: {len(questions)} question turns but {len(gt)} ground-truth turns")
    missed = {int(k): tuple(v) for k, v in entry.get("missed_function", {}).items()}
    return BFCLTask(id=entry["id"], category=category, questions=questions, initial_config=entry["initial_config"],
                    involved_classes=tuple(entry["involved_classes"]), ground_truth=gt, missed_function=missed,
                    path=tuple(entry.get("path", ())))


@lru_cache(maxsize=None)
def load_category(category: str) -> tuple[BFCLTask, ...]:
    """The 200 tasks of one multi-turn category."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}; choose one of {CATEGORIES}")
    root = data_dir()
    questions = _jsonl(root / f"{FILE_PREFIX}{category}.json")
    answers = _jsonl(root / "possible_answer" / f"{FILE_PREFIX}{category}.json")
    if len(questions) != len(answers):
        raise ValueError(f"BFCL {category}: {len(questions)} questions but {len(answers)} answers")
    return tuple(_task(q, a, category) for q, a in zip(questions, answers))


def load_tasks(category: str | None = None) -> tuple[BFCLTask, ...]:
    """The tasks of ``category`` (``base``, ``miss_param``, ``miss_func``, ``long_context``), or all 800 (None/``all``)."""
    if category in (None, "all"):
        return tuple(t for c in CATEGORIES for t in load_category(c))
    return load_category(category)


@lru_cache(maxsize=None)
def tasks_by_id() -> dict[str, BFCLTask]:
    return {t.id: t for t in load_tasks()}


OPENAPI_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def _openapi(schema: Any) -> Any:
    """BFCL's parameter schema in JSON-schema/chat-template types (``dict`` -> ``object``, ``float`` -> ``number``)."""
    if isinstance(schema, dict):
        out = {k: _openapi(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = OPENAPI_TYPES.get(out["type"], out["type"])
        return out
    if isinstance(schema, list):
        return [_openapi(v) for v in schema]
    return schema


@lru_cache(maxsize=None)
def _schema_of(name: str) -> dict[str, Any]:
    for cls in FUNC_DOC_FILES:
        for doc in func_docs(cls):
            if doc["name"] == name:
                return _build_schema(doc)
    raise KeyError(name)


def tool_schema(doc: Mapping[str, Any]) -> dict[str, Any]:
    """One BFCL function doc in Hugging Face chat-template form (as the suite's chat view gives its tools); built
    once per function (the env shares the dict between episodes: treat it as read-only)."""
    return _schema_of(doc["name"])


@lru_cache(maxsize=None)
def short_schema(name: str) -> dict[str, Any]:
    """:func:`tool_schema` with the description cut to its ``Tool description:`` part (BFCL repeats the class's
    preamble in every function) and no parameter descriptions."""
    full = _schema_of(name)["function"]
    description = full["description"].split("Tool description:", 1)[-1].strip()
    props = {k: {f: v for f, v in spec.items() if f != "description"} for k, spec in full["parameters"]["properties"].items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": list(full["parameters"]["required"])}}}


def _build_schema(doc: Mapping[str, Any]) -> dict[str, Any]:
    params = _openapi(doc["parameters"])
    return {"type": "function", "function": {
        "name": doc["name"], "description": doc["description"],
        "parameters": {"type": "object", "properties": params.get("properties", {}),
                       "required": list(params.get("required", []))}}}


def task_docs(task: BFCLTask, revealed_through: int = -1) -> list[dict[str, Any]]:
    """The function docs shown to the agent: the involved classes' docs, less the missing functions not yet
    revealed (those of turns > ``revealed_through``), revealed ones appended in turn order (as BFCL does)."""
    hidden = {name for turn, names in task.missed_function.items() for name in names}
    docs = [d for cls in task.involved_classes for d in func_docs(cls) if d["name"] not in hidden]
    by_name = {d["name"]: d for cls in task.involved_classes for d in func_docs(cls)}
    for turn in sorted(task.missed_function):
        if turn <= revealed_through:
            docs.extend(by_name[n] for n in task.missed_function[turn] if n in by_name)
    return docs
