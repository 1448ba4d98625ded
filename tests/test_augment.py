"""Environment augmentation: the oracle still solves every augmented episode, names are
renamed consistently and translated back, hints say what to fix, and every intensity works."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import rods_gym
from rods_gym import solve
from rods_gym.augment import AugmentConfig, AugmentWrapper, make_augmented_env, paraphrase
from rods_gym.env import ToolChainEnv

AUG_IDS = ("rods/ToolChain-Aug-v0", "rods/ToolChain-Aug-Chat-v0", "rods/ToolChain-Aug-Compact-v0",
           "rods/ToolChain-Aug-Structured-v0")


def call(name: str, args: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def test_augmented_ids_are_registered() -> None:
    for env_id in AUG_IDS:
        assert env_id in rods_gym.ENV_IDS and env_id in gym.registry
    assert "rods/ToolChain-v0" in rods_gym.ENV_IDS  # the existing ids stay


@pytest.mark.parametrize("mode,episodes", [("chat", 120), ("compact", 80), ("structured", 80)])
def test_oracle_solves_every_augmented_episode(mode: str, episodes: int) -> None:
    env = gym.make(f"rods/ToolChain-Aug-{mode.capitalize()}-v0", difficulty="hard", augment=AugmentConfig.full())
    applied = {"redrawn": 0, "extra_distractors": 0, "renamed_tools": 0}
    for ep in range(episodes):
        _, info = env.reset(seed=ep)
        for k in applied:
            applied[k] += info["augment"].get(k, 0)
        ret, last = solve(env)
        assert last["success"] and last["progress"] == 1.0 and ret == pytest.approx(1.0), (mode, ep)
    assert applied["redrawn"] >= 0.7 * episodes and applied["extra_distractors"] >= 2 * episodes
    assert (applied["renamed_tools"] > episodes) == (mode == "chat")


def test_the_wrapper_oracle_action_drives_the_episode() -> None:
    env = make_augmented_env(AugmentConfig.full(seed=1), mode="chat", difficulty="medium")
    for ep in range(20):
        env.reset(seed=ep)
        info = {}
        for _ in range(100):
            _, _, term, trunc, info = env.step(env.oracle_action())
            if term or trunc:
                break
        assert info["success"]


def test_renaming_is_consistent_and_translated_back() -> None:
    cfg = AugmentConfig(error_hints=1.0, rename_tools=1.0, rename_params=1.0, reorder_params=0.0, paraphrase=0.0,
                        distractors=0.0, redraw_world=0.0)
    env = make_augmented_env(cfg, mode="chat", difficulty="easy")
    base = env.unwrapped
    seen_renamed = 0
    for ep in range(30):
        env.reset(seed=ep)
        plan = env.plan
        task = base.task
        shown = {s["function"]["name"]: s for s in base.tools}
        assert set(shown) == {plan.tool_alias[t] for t in task.tools}
        first = task.calls[0]
        if first.id in {d.dst for d in task.deps} or any(first.id == c for t in task.turns for c, _ in t.withheld):
            continue
        if task.turns[0].locked:
            continue
        alias = plan.tool_alias[first.tool]
        params = plan.param_alias[first.tool]
        assert set(shown[alias]["function"]["parameters"]["properties"]) == set(params.values())
        if alias != first.tool:
            seen_renamed += 1
            # the original name does not exist in this episode
            obs, _, _, _, info = env.step(call(first.tool, dict(first.args)))
            assert info["error"] == "unknown_tool" and "Hint:" in obs and alias in obs
            assert base.messages[-1]["content"].count(first.tool) >= 1  # names what the agent wrote
        renamed_args = {params[k]: v for k, v in first.args.items()}
        if any(k != params[k] for k in first.args):
            # original parameter names are unknown too
            _, _, _, _, info = env.step(call(alias, dict(first.args)))
            assert info["error"] == "invalid_arguments"
        before = base.episode.progress
        _, reward, _, _, info = env.step(call(alias, renamed_args))
        assert info["error"] == "none" and reward > 0 and base.episode.progress > before, ep
        assert base.messages[-1]["role"] == "tool" and base.messages[-1]["name"] == alias
    assert seen_renamed >= 15


def test_error_hints_follow_their_intensity() -> None:
    for hints, expect in ((1.0, True), (0.0, False)):
        cfg = AugmentConfig(error_hints=hints, rename_tools=0.0, rename_params=0.0, reorder_params=0.0,
                            paraphrase=0.0, distractors=0.0, redraw_world=0.0)
        env = make_augmented_env(cfg, mode="chat", difficulty="easy")
        env.reset(seed=0)
        tool = env.unwrapped.task.calls[0].tool
        outs = [env.step(a)[0] for a in ('<tool_call>{"name": ', call(tool + "_typo", {}), call(tool, {}),
                                         call(tool, {"bogus_param": 1}))]
        assert all(("Hint:" in o) == expect for o in outs), outs
    # the hints are actionable: they name the fix
    env = make_augmented_env(AugmentConfig(error_hints=1.0, rename_tools=0.0, rename_params=0.0), mode="chat",
                             difficulty="easy")
    env.reset(seed=0)
    tool = env.unwrapped.task.calls[0].tool
    obs = env.step(call(tool + "x", {}))[0]
    assert f"did you mean {tool}?" in obs
    obs = env.step(call(tool, {}))[0]
    assert "add the required argument" in obs
    obs = env.step(call(tool, {**env.unwrapped.task.calls[0].args, "bogus": 1}))[0]
    assert "bogus is not a parameter" in obs


def test_reorder_paraphrase_and_distractors() -> None:
    cfg = AugmentConfig(error_hints=0.0, rename_tools=0.0, rename_params=0.0, reorder_params=1.0, paraphrase=1.0,
                        distractors=1.0, redraw_world=0.0, max_extra_distractors=3)
    env = make_augmented_env(cfg, mode="chat", difficulty="medium")
    plain = ToolChainEnv(mode="chat", difficulty="medium")
    suite = env.unwrapped.suite
    reordered = paraphrased = 0
    for ep in range(20):
        _, info = env.reset(seed=ep)
        task = env.unwrapped.task
        plain.reset(options={"task": task})
        assert info["augment"]["extra_distractors"] == 3
        for schema in env.unwrapped.tools:
            f = schema["function"]
            spec = suite.tools[f["name"]]
            assert set(f["parameters"]["properties"]) == set(spec.param_names)
            assert set(f["parameters"]["required"]) == set(spec.parameters["required"])
            reordered += list(f["parameters"]["properties"]) != list(spec.param_names)
            paraphrased += f["description"] != spec.description
        assert len(env.unwrapped.tools) == len(plain.tools)
    assert reordered >= 20 and paraphrased >= 100
    rng = np.random.default_rng(0)
    text = "Get a customer's name, email and phone."
    assert {paraphrase(text, rng) for _ in range(20)} - {text}


def test_redrawn_world_keeps_task_identity() -> None:
    cfg = AugmentConfig.off()
    cfg = AugmentConfig(**{**cfg.to_dict(), "redraw_world": 1.0})
    env = make_augmented_env(cfg, mode="compact", difficulty="medium")
    plain = ToolChainEnv(mode="compact", difficulty="medium")
    changed = 0
    for ep in range(20):
        _, info = env.reset(seed=ep)
        _, pinfo = plain.reset(seed=ep)
        task, original = env.unwrapped.task, plain.task
        assert task.id == original.id == info["task_id"] and info["signature"] == pinfo["signature"]
        assert [c.tool for c in task.calls] == [c.tool for c in original.calls]
        changed += info["augment"]["redrawn"]
        if info["augment"]["redrawn"]:
            assert task.world_seed != original.world_seed
    assert changed >= 15


def test_off_is_the_identity_and_seeds_reproduce() -> None:
    env = make_augmented_env(AugmentConfig.off(), mode="chat", difficulty="medium")
    plain = ToolChainEnv(mode="chat", difficulty="medium")
    for ep in range(10):
        obs, _ = env.reset(seed=ep)
        pobs, _ = plain.reset(seed=ep)
        assert obs == pobs and env.unwrapped.tools == plain.tools
    a = make_augmented_env(AugmentConfig.full(seed=3), mode="chat")
    b = make_augmented_env(AugmentConfig.full(seed=3), mode="chat")
    for ep in range(5):
        assert a.reset(seed=ep)[0] == b.reset(seed=ep)[0] and a.unwrapped.tools == b.unwrapped.tools
    assert a.reset(seed=0)[0] == b.reset(seed=0)[0]


def test_explicit_tasks_and_vector_envs() -> None:
    tasks = rods_gym.TaskSampler(rods_gym.default_suite(), rods_gym.DIFFICULTIES["medium"], seed=9).sample_many(5)
    env = make_augmented_env(AugmentConfig.full(), mode="structured")
    for t in tasks:
        _, info = env.reset(options={"task": t})
        assert info["task_id"] == t.id
        assert solve(env)[1]["success"]
    venv = gym.make_vec("rods/ToolChain-Aug-Compact-v0", num_envs=2, vectorization_mode="sync")
    obs, info = venv.reset(seed=0)
    assert len(obs) == 2
    venv.close()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="rename_tools"):
        AugmentConfig(rename_tools=1.5)
    with pytest.raises(ValueError, match="max_extra_distractors"):
        AugmentConfig(max_extra_distractors=-1)
    with pytest.raises(TypeError, match="ToolChainEnv"):
        AugmentWrapper(gym.make("CartPole-v1"))
    env = gym.make("rods/ToolChain-Aug-v0", augment={"rename_tools": 0.0, "paraphrase": 0.0})
    assert env.unwrapped.mode == "chat"
