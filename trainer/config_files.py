"""Config files: typed dataclasses built from mappings, YAML files with ``base:`` chains, and dotted overrides.

Nothing here knows the training config's fields: ``from_dict(cls, data)`` builds any (nested) frozen
dataclass from a mapping, converting and checking each value against the field's type hint, so an
unknown key or a wrongly typed value is an error that names its dotted key. ``read_config_file`` reads
a YAML file (a shipped config's name, ``CONFIG_DIR/NAME.yaml``, or a path) and merges it over its
``base:``; ``parse_overrides`` turns ``section.field=value`` strings into a nested mapping, each value
parsed as YAML. ``rods_gym.trainer.config`` puts them together (``load_config``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ValueError(f"config {where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if origin is tuple:
        args = typing.get_args(tp)
        one = isinstance(value, (str, int, float)) and not isinstance(value, bool) and "," not in str(value)
        if len(args) == 2 and args[1] is Ellipsis and one:
            value = [value]  # a list of any length: one value is a list of one (eval.splits=test)
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"config {where}: expected a list, got {value!r} (on the command line: {where}=[a,b])")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, where) for v in value)
        if len(args) != len(value):
            raise ValueError(f"config {where}: expected {len(args)} values, got {len(value)}")
        return tuple(_convert(a, v, where) for a, v in zip(args, value))
    if origin is not None and issubclass(origin, Mapping) or tp is Mapping:
        if not isinstance(value, Mapping):
            raise ValueError(f"config {where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is float and (isinstance(value, (int, float)) and not isinstance(value, bool)
                        or isinstance(value, str) and _looks_numeric(value)):  # YAML 1.1 reads 1e-4 as a string
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"config {where}: expected a finite number, got {value!r}")
        return number
    if tp in (int, str, bool) and not (isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        raise ValueError(f"config {where}: expected {tp.__name__}, got {value!r}")
    if tp is float and not isinstance(value, float):
        raise ValueError(f"config {where}: expected a number, got {value!r}")
    return value


def from_dict(cls: type, data: Mapping[str, Any], where: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"config {where or 'top level'}: unknown key(s) {sorted(unknown)}; known: {sorted(names)}")
    kwargs = {k: _convert(hints[k], v, f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {key!r}: {p!r} is not a section")
    node[parts[-1]] = value


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error (PyYAML keeps the last
    value silently: ``grpo: {lr: 1e-4, lr: 2e-4}`` would train at 2e-4)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def yaml_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key repeated in one mapping."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like key=value (e.g. steps=50 or grpo.lr=1e-4)")
        key, raw = item.split("=", 1)
        try:
            value = yaml_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ValueError(f"override {key.strip()}={raw}: the value is not valid YAML ({problem})") from None
        if isinstance(value, str) and _looks_numeric(raw):
            value = float(raw)
        set_dotted(out, key.strip(), value)
    return out


def _looks_numeric(raw: str) -> bool:
    try:
        float(raw)
        return True
    except ValueError:
        return False


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) and k != "source_options":
            out[k] = merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def is_bare_name(text: str) -> bool:
    """Whether a config reference is a bare name (``seeds``), not a path (``./seeds``, ``my.yaml``, ``dir/x``)."""
    return "/" not in text and os.sep not in text and Path(text).suffix not in (".yaml", ".yml")


def resolve_config_path(path: str | Path) -> Path:
    """A config file path, or the name of a shipped config (``default``, ``chat_tiny``, ...).

    A bare name (a string without a directory part or a ``.yaml``/``.yml`` suffix) is the shipped config
    of that name when there is one, even if the working directory holds a file or folder of the same name
    (a run folder called ``seeds`` must not stand in for the ``seeds`` config); write ``./seeds`` for the
    local file."""
    if isinstance(path, str) and is_bare_name(path) and (CONFIG_DIR / f"{path}.yaml").exists():
        return CONFIG_DIR / f"{path}.yaml"
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"config {str(path)!r} is a directory; give a YAML file or a shipped config's name")
    if p.exists():
        return p
    shipped = CONFIG_DIR / f"{path}.yaml"
    if shipped.exists():
        return shipped
    names = sorted(q.stem for q in CONFIG_DIR.glob("*.yaml"))
    raise FileNotFoundError(f"config {str(path)!r} is neither a file nor a shipped config ({', '.join(names)})")


MAX_BASE_DEPTH = 8


def read_config_file(path: str | Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping. A top-level ``base: NAME_OR_PATH`` key (a shipped config such as
    ``default``, or a file, relative to this one) is read first and this file's keys are merged
    over it, so a config of your own can change a few fields of the main job's."""
    p = resolve_config_path(path).resolve()
    if p in chain or len(chain) >= MAX_BASE_DEPTH:
        raise ValueError(f"config file {p}: its base chain {' -> '.join(str(c) for c in (*chain, p))} "
                         f"{'loops' if p in chain else f'is deeper than {MAX_BASE_DEPTH}'}")
    try:
        loaded = yaml_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"config file {p}:{where}: not valid YAML ({problem})") from None
    if not isinstance(loaded, Mapping):
        raise ValueError(f"config file {p}: the top level must be a mapping")
    data = dict(loaded)
    if "base" not in data:
        return data
    base = data.pop("base")
    if not isinstance(base, str):
        raise ValueError(f"config file {p}: base must be a config name or path, got {base!r}")
    relative, shipped = p.parent / base, CONFIG_DIR / f"{base}.yaml"
    if not relative.is_file() and not shipped.is_file():
        raise FileNotFoundError(f"config file {p}: base {base!r} is neither a file next to it ({relative}) nor a "
                                f"shipped config ({', '.join(sorted(q.stem for q in CONFIG_DIR.glob('*.yaml')))})")
    # as for --config: a bare name is the shipped config of that name when there is one (./NAME: the file)
    if is_bare_name(base) and shipped.is_file():
        target = shipped
    else:
        target = relative if relative.is_file() else shipped
    inherited = read_config_file(target, (*chain, p))
    if "name" in data and "run_dir" not in data:  # a run of its own: runs/<its name>, not the base's directory
        inherited.pop("run_dir", None)
    return merge(inherited, data)



def undot(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping whose dotted keys (``"grpo.lr"``) are nested (``{"grpo": {"lr": ...}}``), merged with its nested ones."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping) and str(key).split(".")[-1] != "source_options":  # a source's own keys stay
            value = undot(value)
        nested: dict[str, Any] = {}
        set_dotted(nested, str(key), value)
        out = merge(out, nested)
    return out
