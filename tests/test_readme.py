"""README.md as a newcomer reads it: every ```python block runs as written, and the figures the code can
generate (tools, domains, skills, the tiny LM's parameters) are the code's.

Each block runs alone, in a fresh namespace and an empty working directory, so a block that leans on an import
of an earlier one fails here as it fails for a reader who copies it. Training is shrunk, never skipped: a
stable-baselines3 ``learn(N)`` runs with ``min(N, LEARN_CAP)`` steps in rollouts of at most ``LEARN_CAP`` steps
and one epoch (on-policy algorithms: PPO, MaskablePPO), and a trainer config loaded through
``rods_gym.trainer.config.load_config`` gets ``SMALL_TRAINER_RUN``'s budgets on top of the block's own overrides.
A block may also shrink its own budget for the test with a comment line ``# readme-test: NAME = VALUE`` (a
variable the block assigns and uses as its budget, e.g. ``steps = 20_000``): the test assigns VALUE instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
LEARN_CAP = 64  # stable-baselines3 steps a README block's learn() runs here, and its rollout size
SMALL_TRAINER_RUN = {"sft.demos": 16, "sft.steps": 2, "steps": 1, "eval.tasks": 4, "eval.samples": 0,
                     "checkpoint_every": 0, "tensorboard": False, "progress_bar": False}


@dataclass(frozen=True)
class Block:
    line: int  # where the block's code starts in README.md (1-based)
    code: str


def python_blocks(text: str) -> list[Block]:
    """The ```python fenced blocks of a Markdown text, with the line each one's code starts on."""
    blocks = []
    for match in re.finditer(r"^```python[ \t]*\n(.*?)^```", text, re.S | re.M):
        blocks.append(Block(text.count("\n", 0, match.start(1)) + 1, match.group(1)))
    return blocks


def shrink_budgets(code: str) -> str:
    """Apply the block's ``# readme-test: NAME = VALUE`` comments: each first assignment ``NAME = ...`` at the
    start of a line gets VALUE instead (a comment naming a variable the block never assigns is an error)."""
    for name, value in re.findall(r"^\s*#\s*readme-test:\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$", code, re.M):
        code, n = re.subn(rf"^({re.escape(name)}\s*=\s*)[^#\n]+", rf"\g<1>{value}", code, count=1, flags=re.M)
        if n == 0:
            raise AssertionError(f"README: '# readme-test: {name} = {value}' names no assignment of {name} in its block")
    return code


BLOCKS = python_blocks(README.read_text())


def test_the_readme_has_python_blocks_and_the_shrink_convention_works() -> None:
    assert len(BLOCKS) >= 3
    assert shrink_budgets("steps = 20_000  # a budget\n# readme-test: steps = 64\nrun(steps)\n") == (
        "steps = 64# a budget\n# readme-test: steps = 64\nrun(steps)\n")
    with pytest.raises(AssertionError, match="names no assignment of steps"):
        shrink_budgets("# readme-test: steps = 64\nrun(1000)\n")


def test_training_in_a_block_is_shrunk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What ``cap_training`` promises: a MaskablePPO ``learn(20_000)`` runs ``LEARN_CAP`` steps in one epoch, and a
    trainer config gets the small run's budgets over the block's own overrides."""
    monkeypatch.chdir(tmp_path)
    cap_training(monkeypatch)
    namespace: dict[str, Any] = {}
    exec(compile("import gymnasium as gym, rods_gym\nfrom sb3_contrib import MaskablePPO\n"
                 "model = MaskablePPO('MultiInputPolicy', gym.make('rods/ToolChain-Easy-Structured-v0'), seed=0)"
                 ".learn(20_000)\n"
                 "from rods_gym.trainer.config import load_config\n"
                 "cfg = load_config('default', {'run_dir': 'runs/py', 'steps': 5, 'grpo.lr': 1e-4})\n",
                 "block", "exec"), namespace)
    model, cfg = namespace["model"], namespace["cfg"]
    assert model.num_timesteps == LEARN_CAP and model.n_steps == LEARN_CAP and model.n_epochs == 1
    assert (cfg.steps, cfg.sft.steps, cfg.eval.tasks, cfg.grpo.lr, cfg.run_dir) == (1, 2, 4, 1e-4, "runs/py")


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_python_block_runs_as_written(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "rods/BFCL-" in block.code:
        pytest.importorskip("bfcl_eval", reason="the BFCL block needs the bfcl extra and bfcl-eval (README, BFCL)")
    monkeypatch.chdir(tmp_path)  # what a block writes (runs/, plots) lands in a scratch directory
    cap_training(monkeypatch)
    code = compile(shrink_budgets(block.code), f"README.md:{block.line}", "exec")
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(code, namespace)  # noqa: S102 (the README's own code)


def cap_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink whatever a block trains: stable-baselines3's ``learn`` (its steps, an on-policy algorithm's rollout
    size and epochs) and the trainer's ``load_config``."""
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    base_init, on_policy_init = BaseAlgorithm.__init__, OnPolicyAlgorithm.__init__

    def with_short_learn(self: Any, *args: Any, **kwargs: Any) -> None:
        base_init(self, *args, **kwargs)
        learn = type(self).learn  # an algorithm's own (MaskablePPO overrides BaseAlgorithm's)

        def short_learn(total_timesteps: int, *a: Any, **k: Any) -> Any:
            if hasattr(self, "n_epochs"):
                self.n_epochs = 1
            return learn(self, min(int(total_timesteps), LEARN_CAP), *a, **k)

        self.learn = short_learn

    def with_short_rollouts(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["n_steps"] = min(int(kwargs.get("n_steps", LEARN_CAP)), LEARN_CAP)
        on_policy_init(self, *args, **kwargs)

    monkeypatch.setattr(BaseAlgorithm, "__init__", with_short_learn)
    monkeypatch.setattr(OnPolicyAlgorithm, "__init__", with_short_rollouts)
    from rods_gym.trainer import config

    load = config.load_config

    def small_config(path: Any = None, overrides: Any = None) -> Any:
        cfg = load(path, overrides)
        return load(path, [*as_override_list(overrides), *(f"{k}={v}" for k, v in SMALL_TRAINER_RUN.items())]) \
            if cfg.steps > 0 else cfg

    monkeypatch.setattr(config, "load_config", small_config)


def as_override_list(overrides: Any) -> list[str]:
    """``load_config``'s overrides (a list of ``key=value`` or a nested / dotted mapping) as a list."""
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        flat: list[str] = []

        def walk(prefix: str, d: dict) -> None:
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(f"{prefix}{k}.", v)
                else:
                    flat.append(f"{prefix}{k}={v}")

        walk("", overrides)
        return flat
    return list(overrides)


# -- figures the code generates ---------------------------------------------------------------------------------
def readme_numbers(pattern: str) -> list[int]:
    """Every number the README writes before ``pattern`` (``105 tools``: 105), commas dropped."""
    return [int(n.replace(",", "")) for n in re.findall(rf"\b(\d[\d,]*) {pattern}\b", README.read_text())]


def test_readme_counts_of_tools_domains_and_skills_are_the_suites() -> None:
    from rods_gym.commands.skills import skill_table
    from rods_gym.suite import Suite

    suite = Suite.load()
    for pattern, actual in (("tools", len(suite.tools)), ("domains", len(suite.domains)),
                            ("skills", len(skill_table(suite)))):
        stated = readme_numbers(pattern)
        assert stated, f"README.md states no number of {pattern}"
        assert set(stated) == {actual}, f"README.md says {sorted(set(stated))} {pattern}; the suite has {actual}"


def parameter_count(config: str, overrides: list[str] | None = None) -> float:
    """Millions of parameters of a trainer config's policy, as ``rods train`` counts them when it starts."""
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.policy import make_policy
    from rods_gym.trainer.sft import env_mode

    cfg = load_config(config, overrides or [])
    policy = make_policy(cfg.policy, env_mode(cfg.data.env_id), slot_ids=cfg.data.slot_ids)
    return round(sum(p.numel() for p in policy.model.parameters()) / 1e6, 2)


def benchmark_tiny_models() -> dict[str, float]:
    """The tiny-LM sizes the LLM benchmarks' scales train (``train: {config, overrides: {policy: ...}}`` in their
    YAML files), by file."""
    import yaml

    sizes = {}
    for path in sorted((README.parent / "benchmarks").rglob("*.yaml")):
        train = (yaml.safe_load(path.read_text()) or {}).get("train") if path.is_file() else None
        if not isinstance(train, dict) or "config" not in train:
            continue
        policy = (train.get("overrides") or {}).get("policy") or {}
        overrides = [f"policy.{k}={v}" for k, v in policy.items()]
        from rods_gym.trainer.config import load_config

        if load_config(train["config"], overrides).policy.model == "tiny":
            sizes[str(path.relative_to(README.parent))] = parameter_count(train["config"], overrides)
    return sizes


def test_readme_parameter_figures_are_models_the_project_builds() -> None:
    """Each ``N.NNM`` the README writes is the size of a tiny LM a shipped config or a benchmark scale builds
    (the 4-layer main job's, 1.09M; the data-efficiency benchmark's 2-layer one, 0.57M; ...)."""
    from rods_gym.trainer.config import CONFIG_DIR, load_config

    built = {}
    for name in sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")):
        if load_config(name).policy.model != "tiny":
            continue
        try:
            built[name] = parameter_count(name)
        except ImportError:  # its env needs an optional package that is absent (bfcl_chat: bfcl-eval)
            continue
    built.update(benchmark_tiny_models())
    stated = [float(x) for x in re.findall(r"\b(\d+\.\d\d)M\b", README.read_text())]
    assert stated, "README.md states no parameter count"
    for figure in stated:
        assert figure in built.values(), f"README.md says {figure:.2f}M parameters; the models built: {built}"


def test_readme_states_the_main_jobs_model_size() -> None:
    """The main job prints its model's size when it starts (``policy tiny-compact: 1.09M parameters``): the
    README must give the same figure for it, not only another model's."""
    main_job = parameter_count("default")
    assert f"{main_job:.2f}M" in README.read_text(), (
        f"README.md never states the main job's model size: rods train builds {main_job:.2f}M parameters "
        "(trainer/configs/default.yaml)")


def test_trainer_readme_names_every_shipped_config() -> None:
    from rods_gym.trainer.config import CONFIG_DIR

    text = (README.parent / "trainer" / "README.md").read_text()
    missing = [p.name for p in sorted(CONFIG_DIR.glob("*.yaml")) if p.name not in text]
    assert not missing, f"trainer/README.md does not name the shipped config(s) {missing}"
