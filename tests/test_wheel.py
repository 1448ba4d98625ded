"""The distribution: a wheel built from the source tree holds the core, the suite's data and
the trainer, and works when installed into a fresh virtual environment."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# source directory -> its place in the wheel ([tool.setuptools.package-dir] in pyproject.toml)
PACKAGE_DIRS = {"rods_gym": "rods_gym", "envs": "rods_gym/envs", "trainer": "rods_gym/trainer"}
SHIPPED = ("*.py", "*.json", "*.jsonl", "*.yaml")


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _expected_files() -> set[str]:
    """Every module and data file of the source tree, as a wheel path."""
    out = set()
    for src, dst in PACKAGE_DIRS.items():
        for pattern in SHIPPED:
            for f in (ROOT / src).rglob(pattern):
                rel = f.relative_to(ROOT / src)
                if "__pycache__" in rel.parts or rel.parts[0] in ("runs", "out"):
                    continue
                out.add(f"{dst}/{rel.as_posix()}")
    return out


@pytest.mark.slow
def test_wheel_contents_and_fresh_install(tmp_path: Path) -> None:
    # build from a clean copy, so the checkout gets no build/ or egg-info directories; the build
    # backend (setuptools) comes from this environment: nothing is downloaded
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "runs", "out")
    for d in PACKAGE_DIRS:
        shutil.copytree(ROOT / d, src / d, ignore=ignore)
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check", "--outdir", str(tmp_path / "dist"), str(src)], src)
    wheels = list((tmp_path / "dist").glob("rods_gym-*.whl"))
    assert len(wheels) == 1
    names = set(zipfile.ZipFile(wheels[0]).namelist())

    expected = _expected_files()
    assert {"rods_gym/__init__.py", "rods_gym/domain_schema.json", "rods_gym/envs/value_types.json",
            "rods_gym/trainer/__init__.py"} <= expected
    assert len([n for n in expected if n.startswith("rods_gym/envs/domains/")]) >= 8
    missing = sorted(expected - names)
    assert not missing, f"the wheel lacks {len(missing)} source files, e.g. {missing[:8]}"
    tasksets = sorted((ROOT / "envs" / "tasksets").glob("*.jsonl"))
    assert all(f"rods_gym/envs/tasksets/{t.name}" in names for t in tasksets)

    # a fresh venv: the wheel's package, the test environment's dependencies (not its rods_gym)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip())
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    (purelib / "test_deps.pth").write_text("\n".join(deps) + "\n")  # plain paths: the editable install stays out
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          str(wheels[0])], tmp_path)
    check = (
        "import rods_gym, rods_gym.envs, rods_gym.trainer\n"
        "from rods_gym import ToolChainEnv, default_suite, solve\n"
        "print(rods_gym.__file__)\n"
        "suite = default_suite(); print(len(suite.tools), len(suite.domains))\n"
        "env = ToolChainEnv(mode='chat', difficulty='easy'); env.reset(seed=0); print(solve(env)[0])\n"
    )
    out = _run([str(python), "-c", check], tmp_path).split("\n")
    assert out[0].startswith(str(env_dir)), f"imported {out[0]}, not the installed wheel"
    tools, domains = map(int, out[1].split())
    assert tools >= 80 and domains >= 8
    assert float(out[2]) == pytest.approx(1.0)
    assert (env_dir / "bin" / "rods").exists()  # the console script
    help_text = _run([str(env_dir / "bin" / "rods"), "--help"], tmp_path)
    assert "graph" in help_text and "play" in help_text
