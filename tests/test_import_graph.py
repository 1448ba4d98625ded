"""The package's layers hold: no import circle, and no import that reaches up a layer.

Layers, bottom to top (DESIGN §2): the core (``rods_gym`` without ``trainer`` and ``integrations``; the
curricula are in it and stay torch-free), the trainer (``rods_gym.trainer``: torch, transformers, SB3), the
integrations (``rods_gym.integrations``: hosts outside the project, optional extras), and ``benchmarks/`` (not
a package module; nothing in the package imports it). Rules checked here:

* no import circle (modules form a DAG: commands on top, pipeline below, config knows no sources);
* the core never imports the trainer, the integrations or the benchmarks, nor torch-side libraries;
* the trainer never imports the integrations;
* library code never imports the task-set build script (``rods_gym.envs.build_tasksets``);
* no import of the project's own modules can silently miss: an ``except ImportError`` that swallows the
  error may only guard third-party modules (optional extras), never a ``rods_gym`` module or a module named by
  a computed string.

The graph is built from ``ast``-parsed imports of every module in the three source folders that make up the
``rods_gym`` package (``rods_gym/``, ``trainer/`` as ``rods_gym.trainer``, ``envs/`` as ``rods_gym.envs``), so a
circle is found whether or not the import sits inside a function.
"""

from __future__ import annotations

import ast
import subprocess
import sys
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
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = raw_imports(path, here, with_names=True)
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


# -- layering ------------------------------------------------------------------------------------
TRAINER, INTEGRATIONS, BUILD_SCRIPT = "rods_gym.trainer", "rods_gym.integrations", "rods_gym.envs.build_tasksets"
HEAVY = ("torch", "transformers", "stable_baselines3", "sb3_contrib", "accelerate", "peft", "trl", "verl",
         "datasets")  # the trainer's and the integrations' libraries: never the core's


def raw_imports(path: Path, here: str, with_names: bool = False) -> set[str]:
    """Every module name ``path`` imports (absolute, and relative ones resolved against package ``here``);
    ``with_names``: also ``module.name`` for each name of a ``from module import name`` (it may be a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            if with_names:
                out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_violations(folders: dict[str, Path] | None = None) -> list[str]:
    """Each import that breaks a layering rule, as ``module -> imported (rule)``."""
    folders = folders or FOLDERS
    root = next(iter(folders))  # the top package ("rods_gym")
    trainer, integrations, script = (f"{root}{n[len('rods_gym'):]}" for n in (TRAINER, INTEGRATIONS, BUILD_SCRIPT))
    bad = []
    for package, folder in folders.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            here = name if path.name == "__init__.py" else name.rpartition(".")[0]
            core = not (_within(name, trainer) or _within(name, integrations))
            for target in raw_imports(path, here):
                if core and (_within(target, trainer) or _within(target, integrations)):
                    bad.append(f"{name} -> {target} (the core never imports the trainer or the integrations)")
                if core and target.split(".")[0] in HEAVY:
                    bad.append(f"{name} -> {target} (the core stays free of torch-side libraries)")
                if _within(target, "benchmarks"):
                    bad.append(f"{name} -> {target} (library code never imports the benchmarks)")
                if _within(name, trainer) and _within(target, integrations):
                    bad.append(f"{name} -> {target} (the trainer never imports the integrations)")
                if _within(target, script) and name != script:
                    bad.append(f"{name} -> {target} (library code never imports the build script)")
    return bad


def silent_import_misses(folders: dict[str, Path] | None = None) -> list[str]:
    """``try`` blocks whose ``except ImportError`` swallows the error while importing a project module (or a
    module named by a computed string): such an import can silently miss."""
    folders = folders or FOLDERS
    root = next(iter(folders))
    found = []
    for package, folder in folders.items():
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(node, ast.Try):
                    continue
                swallowing = [h for h in node.handlers if _catches_import_error(h)
                              and not any(isinstance(n, ast.Raise) for n in ast.walk(h))]
                if not swallowing:
                    continue
                for stmt in node.body:
                    for n in ast.walk(stmt):
                        own = (isinstance(n, ast.ImportFrom) and (n.level or _within(n.module or "", root))) or (
                            isinstance(n, ast.Import) and any(_within(a.name, root) for a in n.names))
                        computed = (isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", ""))
                                    in ("import_module", "__import__")
                                    and not (n.args and isinstance(n.args[0], ast.Constant)))
                        if own or computed:
                            found.append(f"{path.relative_to(folder.parent)}:{n.lineno}")
    return found


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = []
    for t in ([handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts):
        names.append(getattr(t, "id", getattr(t, "attr", "")))
    return handler.type is None or bool({"ImportError", "ModuleNotFoundError", "Exception"} & set(names))


def test_the_layers_hold() -> None:
    assert not layer_violations(), "imports that reach up a layer:\n" + "\n".join(layer_violations())


def test_no_project_import_can_silently_miss() -> None:
    assert not silent_import_misses(), f"swallowed ImportError around a project import: {silent_import_misses()}"


def _plant(tmp: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return {"pkg": tmp / "pkg", "pkg.trainer": tmp / "trainer"}


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    folders = _plant(tmp_path, {"pkg/__init__.py": "", "pkg/core.py": "def f():\n    from pkg.trainer import loop\n",
                                "pkg/curricula/__init__.py": "import torch\n",
                                "trainer/__init__.py": "", "trainer/loop.py": "from pkg.integrations import trl\n",
                                "pkg/integrations/__init__.py": "", "pkg/integrations/trl.py": "",
                                "pkg/uses_script.py": "from .envs.build_tasksets import main\n"})
    found = layer_violations(folders)
    assert any(v.startswith("pkg.core -> pkg.trainer") for v in found), found
    assert any(v.startswith("pkg.curricula -> torch") for v in found), found
    assert any(v.startswith("pkg.trainer.loop -> pkg.integrations") for v in found), found
    assert any(v.startswith("pkg.uses_script -> pkg.envs.build_tasksets") for v in found), found
    assert len(found) == 4


def test_a_planted_silent_miss_is_found(tmp_path: Path) -> None:
    folders = _plant(tmp_path, {"pkg/__init__.py": "", "trainer/__init__.py": "",
                                "pkg/a.py": "try:\n    from pkg import optional\nexcept ImportError:\n    optional = None\n",
                                "pkg/b.py": "import importlib\nfor n in names:\n    try:\n"
                                            "        importlib.import_module(n)\n    except ModuleNotFoundError:\n"
                                            "        pass\n",
                                "pkg/ok.py": "try:\n    import yaml\nexcept ImportError:\n    yaml = None\n"
                                             "try:\n    from pkg import x\nexcept ImportError as e:\n"
                                             "    raise RuntimeError('install x') from e\n"})
    assert sorted(silent_import_misses(folders)) == ["pkg/a.py:2", "pkg/b.py:4"]


def test_the_curricula_import_without_torch() -> None:
    code = ("import sys, rods_gym.curricula as c; c.make_source('fixed', [c.FixedSeeds.__name__] and "
            "__import__('rods_gym').load_split('train')[:4]); "
            "bad = [m for m in ('torch', 'transformers', 'stable_baselines3', 'rods_gym.trainer') if m in sys.modules]; "
            "print(bad); raise SystemExit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
