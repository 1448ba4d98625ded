"""benchmarks/env_throughput.py at the smoke scale, end to end in its own process (it pins itself to
one core). Speeds are measured by the benchmark, not asserted here: this checks that every figure
is produced, positive, and that the sampler's figure is the median of its fresh-process runs."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from conftest import BENCHMARKS_DIR


def test_smoke_scale_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    run = subprocess.run([sys.executable, str(BENCHMARKS_DIR / "env_throughput.py"), "--scale", "smoke",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    figures = json.loads(out.read_text())
    for mode in ("chat", "compact", "structured"):
        for kind in ("oracle_steps_per_s", "invalid_steps_per_s", "oracle_steps_per_s_gym_make"):
            assert figures[f"{mode}_{kind}"] > 0, (mode, kind)
    assert figures["resets_per_s"] > 0 and figures["resets_per_s_chat"] > 0
    for who in ("features", "features_before"):  # the features view beside the renderer it replaced
        for workload in ("oracle", "random"):
            assert figures[f"{who}_{workload}_steps_per_s"] > 0 and figures[f"{who}_{workload}_steps_per_s_with_resets"] > 0
    assert figures["features_random_speedup"] > 0
    fresh = figures["sampler_tasks_per_s_fresh_processes"]
    assert len(fresh) == 1 and all(r > 0 for r in fresh) and figures["sampler_tasks_per_s_in_process"] > 0
    assert figures["sampler_tasks_per_s"] == statistics.median(fresh)
    for target in ("chat", "structured", "reset", "sampler", "features"):
        assert f"target {target}" in run.stdout
