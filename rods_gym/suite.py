"""A suite: loaded domains plus everything derived from them (graph, executor, worlds)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import networkx as nx

from .argcheck import ArgChecker
from .domain import Domain, DomainError, EntitySpec, ToolSpec, ValueType, load_domain_file
from .executor import Executor
from .graph import build_api_graph, output_ports, skill_of
from .world import ValuePools, World


def _envs_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("rods_gym.envs")))


def load_value_types(path: str | Path | None = None) -> dict[str, ValueType]:
    path = Path(path) if path else _envs_dir() / "value_types.json"
    raw = json.loads(path.read_text())
    return {k: ValueType(k, v["schema"], v["role"], v.get("description", "")) for k, v in raw["types"].items()}


class Suite:
    """Domains and their derived, read-only structures. Worlds are cached (bounded LRU)."""

    def __init__(self, domains: Sequence[Domain], base_types: Mapping[str, ValueType], world_cache: int = 256) -> None:
        self.domains = tuple(domains)
        self.types: dict[str, ValueType] = dict(base_types)
        for d in self.domains:
            self.types.update(d.types)
        self.entities: dict[str, EntitySpec] = {k: v for d in self.domains for k, v in d.entities.items()}
        self.tools: dict[str, ToolSpec] = {t.name: t for d in self.domains for t in d.tools}
        self.tool_names: tuple[str, ...] = tuple(self.tools)
        self.tool_index = {n: i for i, n in enumerate(self.tool_names)}
        self.id_entity = {e.id_field: e.name for e in self.entities.values()}
        self.public_schemas = {n: t.public_schema() for n, t in self.tools.items()}
        self.checkers = {n: ArgChecker(n, t.parameters) for n, t in self.tools.items()}
        self.skills = {n: skill_of(t, self.entities) for n, t in self.tools.items()}
        self.ports = {n: output_ports(t, self.types) for n, t in self.tools.items()}
        self.graph: nx.MultiDiGraph = build_api_graph(self.tools.values(), self.types, self.entities)
        self.pools = ValuePools(seed=0)
        self.executor = Executor(self.entities, self.id_entity, self.pools)
        self._worlds: OrderedDict[int, World] = OrderedDict()
        self._world_cache = world_cache
        self._world_lock = threading.RLock()  # worlds are generated one at a time (see ValuePools)
        self.type_names: tuple[str, ...] = tuple(sorted(self.types))
        self.type_index = {n: i for i, n in enumerate(self.type_names)}

    @classmethod
    def load(cls, domain_dir: str | Path | None = None, extra_dirs: str | Path | Sequence[str | Path] = ()) -> "Suite":
        """Load the suite's domains (default: the built-in ones) plus any extra directories (one path,
        or a sequence of them)."""
        if isinstance(extra_dirs, (str, Path)):
            extra_dirs = (extra_dirs,)
        base = load_value_types()
        known = dict(base)
        domains: list[Domain] = []
        owner: dict[str, str] = {}
        dirs = [Path(domain_dir) if domain_dir else _envs_dir() / "domains", *map(Path, extra_dirs)]
        for directory in dirs:
            if not directory.is_dir():
                raise DomainError(str(directory), "", "no such directory" if not directory.exists()
                                  else "not a directory (give the directory that holds the domain files)")
            files = sorted(directory.glob("*.json"))
            if not files:
                raise DomainError(str(directory), "", "no domain files (*.json) in this directory")
            for f in files:
                d = load_domain_file(f, known)
                for t in d.tools:
                    if t.name in owner:
                        raise DomainError(str(f), "tools", f"tool {t.name!r} is already defined in {owner[t.name]}")
                    owner[t.name] = str(f)
                if d.name in {x.name for x in domains}:
                    raise DomainError(str(f), "name", f"domain {d.name!r} is defined twice")
                known.update(d.types)
                domains.append(d)
        return cls(domains, base)

    def world(self, seed: int) -> World:
        """The base world of ``seed`` (cached). Safe to call from several threads: generation is serialized, so a
        threaded host gets the worlds a single thread gets."""
        with self._world_lock:
            w = self._worlds.get(seed)
            if w is None:
                w = World.generate(self.domains, seed, self.pools)
                self._worlds[seed] = w
                if len(self._worlds) > self._world_cache:
                    self._worlds.popitem(last=False)
            else:
                self._worlds.move_to_end(seed)
            return w

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_world_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._world_lock = threading.RLock()

    def domain_of(self, tool: str) -> str:
        return self.tools[tool].domain


@lru_cache(maxsize=4)
def default_suite() -> Suite:
    """The built-in suite, loaded once per process (it is read-only apart from its world cache)."""
    return Suite.load()
