"""Fast validation of tool arguments against the tools' JSON Schemas.

``jsonschema`` costs about 25 µs per call on these schemas, more than the whole step budget
of the chat env. Tool parameter schemas use a small, fixed subset of JSON Schema (type,
enum, pattern, min/max length, minimum/maximum, exclusiveMinimum, required,
additionalProperties: false), so each tool's schema is compiled once into a checker that
returns the first problem as a readable message. Anything outside that subset is rejected at
compile time. ``tests/test_argcheck.py`` checks with hypothesis that the checker accepts
exactly what ``jsonschema`` accepts.
"""

from __future__ import annotations

import math
import operator
import re
from typing import Any, Callable, Mapping

SUPPORTED = {"type", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum",
             "exclusiveMinimum", "exclusiveMaximum", "description", "format", "title"}
_JSON_TYPE = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    # ints of any size are finite (math.isfinite would overflow on 10**400); NaN/inf are not JSON
    "number": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and math.isfinite(v)),
    "boolean": lambda v: isinstance(v, bool),
}
Check = Callable[[Any], "str | None"]


def _short(value: Any, limit: int = 40) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compile_property(name: str, schema: Mapping[str, Any]) -> Check:
    keys = {k for k in schema if not k.startswith("x-")}
    unknown = keys - SUPPORTED
    if unknown:
        raise ValueError(f"parameter {name!r}: unsupported JSON Schema keywords {sorted(unknown)}")
    checks: list[Check] = []
    jtype = schema.get("type")
    if jtype is not None:
        if not isinstance(jtype, str) or jtype not in _JSON_TYPE:
            raise ValueError(f"parameter {name!r}: unsupported type {jtype!r}; use one of {sorted(_JSON_TYPE)}")
        is_type = _JSON_TYPE[jtype]
        checks.append(lambda v: None if is_type(v) else f"'{name}' must be {jtype}, got {type(v).__name__} {_short(v)}")
    if "enum" in schema:
        allowed = tuple(schema["enum"])
        # as in JSON Schema, true is not 1 and false is not 0
        checks.append(lambda v: None if any(a == v and isinstance(a, bool) == isinstance(v, bool) for a in allowed)
                      else f"'{name}' must be one of {list(allowed)}, got {_short(v)}")
    if "pattern" in schema:
        rx = re.compile(schema["pattern"])
        checks.append(lambda v: None if not isinstance(v, str) or rx.search(v)
                      else f"'{name}' has the wrong format {_short(v)} (expected pattern {rx.pattern})")
    if "minLength" in schema:
        lo = schema["minLength"]
        checks.append(lambda v: None if not isinstance(v, str) or len(v) >= lo else f"'{name}' is too short (min {lo} characters)")
    if "maxLength" in schema:
        hi = schema["maxLength"]
        checks.append(lambda v: None if not isinstance(v, str) or len(v) <= hi
                      else f"'{name}' is too long ({len(v)} characters, max {hi})")
    for key, op, word in (("minimum", operator.ge, ">="), ("maximum", operator.le, "<="),
                          ("exclusiveMinimum", operator.gt, ">"), ("exclusiveMaximum", operator.lt, "<")):
        if key in schema:
            bound = schema[key]
            # compare v itself: Python compares ints and floats exactly, float(10**400) would overflow
            checks.append(lambda v, bound=bound, op=op, word=word: None
                          if not _JSON_TYPE["number"](v) or op(v, bound)
                          else f"'{name}' must be {word} {bound:g}, got {_short(v)}")

    def check(value: Any) -> str | None:
        for c in checks:
            msg = c(value)
            if msg is not None:
                return msg
        return None

    return check


class ArgChecker:
    """A compiled checker for one tool's ``parameters`` object schema."""

    def __init__(self, tool: str, parameters: Mapping[str, Any]) -> None:
        self.tool = tool
        self.props = {n: compile_property(n, s) for n, s in parameters["properties"].items()}
        self.required = tuple(parameters.get("required", ()))
        self.closed = parameters.get("additionalProperties", True) is False

    def check(self, args: Any) -> str | None:
        """Return ``None`` when ``args`` is valid, else a message naming the problem."""
        if not isinstance(args, dict):
            return f"arguments of {self.tool} must be a JSON object, got {type(args).__name__}"
        missing = [r for r in self.required if r not in args]
        if missing:
            return f"{self.tool} is missing required argument(s) {missing}"
        for key, value in args.items():
            prop = self.props.get(key)
            if prop is None:
                if self.closed:
                    return f"{self.tool} has no parameter {_short(key)}; it takes {sorted(self.props)}"
                continue
            msg = prop(value)
            if msg is not None:
                return msg
        return None
