"""Offline synthesis (``rods synth``) and the skill taxonomy (``rods skills``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rods_gym import DIFFICULTIES, Suite, TaskSampler, TaskSpec, compute_signature, read_jsonl, write_jsonl
from rods_gym.cli import CORE_COMMANDS, main
from rods_gym.commands.skills import skill_table
from rods_gym.resampler import NaiveResampler, Resampler, binding_key, content_key, oracle_solves
from rods_gym.synth import synthesize


@pytest.fixture(scope="module")
def seeds(suite: Suite) -> list[TaskSpec]:
    return TaskSampler(suite, DIFFICULTIES["medium"], seed=31).sample_many(40)


def test_synthesize_is_uniform_unique_and_reproducible(suite: Suite, seeds: list[TaskSpec]) -> None:
    tasks = synthesize(seeds, 400, Resampler(suite), seed=0)
    assert len(tasks) == 400
    keys = {content_key(t) for t in tasks}
    assert len(keys) == 400 and not keys & {content_key(s) for s in seeds}
    assert len({t.id for t in tasks}) == 400
    parents = Counter(t.meta["parent"] for t in tasks)
    assert set(parents) <= {s.id for s in seeds} and len(parents) >= 38
    # uniform parents: 10 expected per seed; a chi-square statistic far below its 0.1% tail (~73 at 39 dof)
    chi2 = sum((parents.get(s.id, 0) - 10) ** 2 / 10 for s in seeds)
    assert chi2 < 73, chi2
    assert all(t.meta["generation"] == 1 for t in tasks)
    again = synthesize(seeds, 400, Resampler(suite), seed=0)
    assert [t.to_json() for t in again] == [t.to_json() for t in tasks]
    other = synthesize(seeds, 50, Resampler(suite), seed=1)
    assert [t.id for t in other] != [t.id for t in tasks[:50]]
    by_id = {s.id: s for s in seeds}
    exact = [t for t in tasks if t.meta["tier"] == 0]
    assert len(exact) >= 0.9 * len(tasks)
    for t in exact[::10]:
        assert compute_signature(t, suite).same(compute_signature(by_id[t.meta["parent"]], suite))
        assert oracle_solves(t, suite)


def test_synthesize_rejects_bad_input(suite: Suite) -> None:
    with pytest.raises(ValueError, match="at least one seed"):
        synthesize([], 5, Resampler(suite))
    with pytest.raises(ValueError, match="n must be"):
        synthesize(TaskSampler(suite, DIFFICULTIES["easy"], seed=0).sample_many(2), -1, Resampler(suite))


def test_rods_synth_cli(tmp_path: Path, suite: Suite, seeds: list[TaskSpec],
                        capsys: pytest.CaptureFixture[str]) -> None:
    assert "rods_gym.commands.synth" in CORE_COMMANDS and "rods_gym.commands.skills" in CORE_COMMANDS
    seed_path, held_path = tmp_path / "seeds.jsonl", tmp_path / "held.jsonl"
    write_jsonl(seeds, seed_path)
    held = TaskSampler(suite, DIFFICULTIES["medium"], seed=32, id_prefix="held").sample_many(60)
    write_jsonl(held, held_path)
    outs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.jsonl"
        rc = main(["synth", "--seeds", str(seed_path), "--n", "120", "--seed", "4", "--out", str(out),
                   "--decontaminate", str(held_path), "--no-progress"])
        assert rc == 0
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    tasks = read_jsonl(tmp_path / "a.jsonl")
    assert len(tasks) == 120 and all(t.meta["source"] == "resample" for t in tasks)
    assert not {binding_key(t) for t in tasks} & {binding_key(h) for h in held}
    printed = capsys.readouterr().out
    assert "wrote 120 tasks" in printed and "decontaminated against" in printed
    rc = main(["synth", "--seeds", str(seed_path), "--n", "15", "--seed", "4", "--out", str(tmp_path / "n.jsonl"),
               "--naive", "--decontaminate", "none", "--no-progress"])
    naive = read_jsonl(tmp_path / "n.jsonl")
    assert rc == 0 and len(naive) == 15 and all(t.meta["resampler"] == "naive" for t in naive)
    assert "tiers: none (naive resampler, 15 tasks)" in capsys.readouterr().out
    assert main(["synth", "--seeds", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "neither a split" in capsys.readouterr().err


def test_an_interrupted_rods_synth_leaves_no_partial_set(tmp_path: Path, seeds: list[TaskSpec], capsys,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C part-way: one line, exit 130, and no file an offline run would read as the whole set
    (an earlier complete file at the same path is kept)."""
    from rods_gym.commands import synth as synth_command

    seed_path, out = tmp_path / "seeds.jsonl", tmp_path / "set.jsonl"
    write_jsonl(seeds, seed_path)
    out.write_text("earlier\n")
    real = synth_command.iter_synthesize

    def interrupted(*args, **kwargs):
        for i, task in enumerate(real(*args, **kwargs)):
            if i == 5:
                raise KeyboardInterrupt
            yield task

    monkeypatch.setattr(synth_command, "iter_synthesize", interrupted)
    argv = ["synth", "--seeds", str(seed_path), "--n", "50", "--out", str(out), "--decontaminate", "none",
            "--no-progress"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted after 5 of 50 tasks; nothing written to" in err and "Traceback" not in err
    assert out.read_text() == "earlier\n" and sorted(p.name for p in tmp_path.iterdir()) == ["seeds.jsonl", "set.jsonl"]
    monkeypatch.setattr(synth_command, "iter_synthesize", real)
    assert main(argv) == 0 and len(read_jsonl(out)) == 50


def test_rods_synth_refuses_an_empty_set(tmp_path: Path, capsys) -> None:
    out = tmp_path / "empty.jsonl"
    assert main(["synth", "--n", "0", "--out", str(out), "--no-progress"]) == 2
    assert "--n must be >= 1" in capsys.readouterr().err and not out.exists()


def test_rods_graph_refuses_a_negative_sample_count(capsys) -> None:
    assert main(["graph", "--samples", "-1"]) == 2
    assert "--samples must be >= 0, got -1" in capsys.readouterr().err


def test_naive_synthesis_matches_the_interface(suite: Suite, seeds: list[TaskSpec]) -> None:
    tasks = synthesize(seeds, 30, NaiveResampler(suite), seed=0)
    assert len(tasks) == 30 and len({content_key(t) for t in tasks}) == 30
    parents = {s.id: s for s in seeds}
    same = sum(compute_signature(t, suite).same(compute_signature(parents[t.meta["parent"]], suite)) for t in tasks)
    assert same <= 6


def test_skill_taxonomy(suite: Suite, capsys: pytest.CaptureFixture[str]) -> None:
    table = skill_table(suite)
    assert sum(len(tools) for per in table.values() for tools in per.values()) == len(suite.tools)
    for skill, per in table.items():
        kind, role = skill.split(":")
        for domain, tools in per.items():
            for t in tools:
                spec = suite.tools[t]
                assert spec.kind == kind and suite.entities[spec.entity].role == role and spec.domain == domain
    assert main(["skills"]) == 0
    out = capsys.readouterr().out
    assert f"{len(table)} skills" in out and all(skill in out for skill in table)
    total_line = next(line for line in out.splitlines() if line.startswith("total"))
    assert total_line.split()[-1] == str(len(suite.tools))
    assert main(["skills", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == table


def test_output_piped_into_a_reader_that_stops_early_is_no_traceback() -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "rods_gym.cli", "skills", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the command writes a byte
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err
