"""Where a figure came from: the command that made it, the date, the machine and the code (commit plus the paths
with uncommitted changes), recorded once by every benchmark in the same words."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
# the code a benchmark figure depends on; a change elsewhere (docs, tests) does not change a figure
CODE_PATHS = ("rods_gym", "trainer", "envs", "benchmarks")


def command(argv: Sequence[str] | None = None) -> str:
    """The command line as typed from the repository root: ``python benchmarks/X.py ARGS`` (or ``-m``)."""
    argv = list(sys.argv if argv is None else argv)
    script = argv[0] if argv else "?"
    path = Path(script)
    if path.suffix == ".py" and path.exists():
        try:
            script = str(path.resolve().relative_to(ROOT))
        except ValueError:
            script = str(path)
    return "python " + " ".join(shlex.quote(a) for a in [script, *argv[1:]])


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> str:
    """CPU architecture, cores and host name; the GPU when torch is already loaded and sees one."""
    text = f"{platform.machine()}, {os.cpu_count()} cores ({platform.node()}), Python {platform.python_version()}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name(0)}"
    return text


def code_version(paths: Sequence[str] = CODE_PATHS, root: Path = ROOT) -> str:
    """The short commit, plus the paths under ``paths`` with uncommitted changes (a figure made with them is
    not the commit's figure: the report says so)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=root, capture_output=True,
                               text=True, check=True).stdout.rstrip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    changed = sorted({line[3:] for line in dirty.splitlines()})
    return head + (" + uncommitted changes in " + ", ".join(changed) if changed else "")


def provenance(argv: Sequence[str] | None = None) -> dict[str, str]:
    """``{command, date, machine, code}`` of this run."""
    return {"command": command(argv), "date": utc_now(), "machine": machine(), "code": code_version()}


def line(prov: dict[str, str], wall_seconds: float | None = None) -> str:
    """One Markdown paragraph: the command, then date, machine, wall time and code."""
    wall = f"; wall time {wall_seconds / 60:.1f} min" if wall_seconds is not None else ""
    return (f"Command: `{prov['command']}`  \nDate: {prov['date']}; machine: {prov['machine']}{wall}; "
            f"code {prov['code']}")
