"""No import circle inside rods_gym: modules form a DAG (commands on top, pipeline below, config knows no sources).

The graph is built from ``ast``-parsed imports of every module in the three source folders that make up the
``rods_gym`` package (``rods_gym/``, ``trainer/`` as ``rods_gym.trainer``, ``envs/`` as ``rods_gym.envs``), so a
circle is found whether or not the import sits inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"rods_gym": ROOT / "rods_gym", "rods_gym.trainer": ROOT / "trainer", "rods_gym.envs": ROOT / "envs"}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package's folders."""
    found: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's own modules that ``name`` imports (absolute and relative forms, ``from x import module``)."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
    resolved = set()
    for target in targets:
        while target and target not in known:  # a name imported from a module -> that module
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):  # a package's own __init__ is no edge
            resolved.add(target)
    return resolved


def import_graph() -> nx.DiGraph:
    files = module_files()
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        graph.add_edges_from((name, target) for target in imported_modules(name, path, set(files)))
    return graph


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert graph.number_of_nodes() > 50 and graph.has_edge("rods_gym.trainer.commands", "rods_gym.trainer.pipeline")
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles, f"import circles (each a set of modules importing each other): {circles}"


def test_configuration_knows_no_sources() -> None:
    assert not nx.has_path(import_graph(), "rods_gym.trainer.config", "rods_gym.trainer.sources")


def test_a_planted_circle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import g\n")
    (tmp_path / "__init__.py").write_text("")
    monkeypatch.setitem(globals(), "FOLDERS", {"pkg": tmp_path})
    graph = import_graph()
    assert {"pkg.a", "pkg.b"} in [set(c) for c in nx.strongly_connected_components(graph)]
