"""ToolChainEnv as a Gymnasium environment: checkers, registration, vectorization, reward,
info, truncation and rendering."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rods_gym
from rods_gym import RewardConfig, SamplerConfig, ToolChainEnv
from rods_gym.episode import ERROR_CLASSES

from conftest import run_oracle

MODES = ("chat", "compact", "structured")
INFO_KEYS = {"progress", "success", "error", "turn", "step", "task_id", "signature"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("difficulty", ["Easy", "Hard"])
def test_gymnasium_check_env(mode: str, difficulty: str) -> None:
    env = gym.make(f"rods/ToolChain-{difficulty}-{mode.capitalize()}-v0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)  # also renders in every render mode
    assert [str(w.message) for w in caught] == []


def test_sb3_check_env_structured() -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = ToolChainEnv(mode="structured", difficulty="medium")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(env, warn=True)
    assert [str(w.message) for w in caught] == []


CORE_IDS = ["rods/ToolChain-v0"] + [
    f"rods/ToolChain-{v}-v0" for v in ["Easy", "Medium", "Hard", "Chat", "Compact", "Structured"]
    + [f"{d}-{m}" for d in ("Easy", "Medium", "Hard") for m in ("Chat", "Compact", "Structured")]]


def test_registration() -> None:
    ids = rods_gym.ENV_IDS
    assert len(ids) == len(set(ids))
    assert len(CORE_IDS) == 16 and set(CORE_IDS) <= set(ids)
    for env_id in ids:  # every registered id (core and variants) makes and resets
        assert env_id in gym.registry
        env = gym.make(env_id)
        obs, info = env.reset(seed=0)
        assert obs in env.observation_space and INFO_KEYS <= set(info)
        env.close()
    for env_id in CORE_IDS:
        env = gym.make(env_id)
        base = env.unwrapped
        assert isinstance(base, ToolChainEnv)
        name = env_id.split("/")[1]
        mode = next((m for m in MODES if m.capitalize() in name), "chat")
        assert base.mode == mode
        difficulty = next((d for d in ("easy", "medium", "hard") if d.capitalize() in name), "medium")
        assert base.sampler.config == rods_gym.DIFFICULTIES[difficulty]
        obs, info = env.reset(seed=0)
        assert obs in env.observation_space and INFO_KEYS <= set(info)
        env.close()
    # constructor arguments still pass through gym.make
    env = gym.make("rods/ToolChain-v0", mode="structured", max_steps=5)
    assert env.unwrapped.mode == "structured" and env.unwrapped.max_steps == 5


@pytest.mark.parametrize("vectorization_mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", ["rods/ToolChain-Easy-Structured-v0", "rods/ToolChain-v0"])
def test_make_vec(vectorization_mode: str, env_id: str) -> None:
    text = "Structured" not in env_id
    # Gymnasium 1.x reads Text observations out of shared memory once (README): text views go async without it
    kwargs = {"vector_kwargs": {"shared_memory": False}} if text and vectorization_mode == "async" else {}
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=vectorization_mode, **kwargs)
    try:
        obs, info = envs.reset(seed=[1, 2])
        assert obs in envs.observation_space
        if text:  # the real observations, as a single env with the same seed gives them
            single = gym.make(env_id)
            assert tuple(obs) == (single.reset(seed=1)[0], single.reset(seed=2)[0])
            assert all(o.startswith("user:") for o in obs)
        assert len(set(info["task_id"])) == 2  # different seeds, different tasks
        envs.action_space.seed(0)
        ends = 0
        for _ in range(25):
            obs, reward, term, trunc, info = envs.step(envs.action_space.sample())
            assert obs in envs.observation_space
            if text:  # a fresh observation every step (an error or a result; "" only where an episode ended)
                assert all(o.strip() or done for o, done in zip(obs, term | trunc))
            assert reward.shape == (2,) and np.all(np.isfinite(reward))
            assert set(info["error"]) <= set(ERROR_CLASSES)
            ends += int(term.sum() + trunc.sum())
        assert ends >= 1  # episodes end and auto-reset
    finally:
        envs.close()


@pytest.mark.parametrize("env_id", ["rods/ToolChain-v0", "rods/ToolChain-Compact-v0"])
def test_async_vector_envs_of_the_text_views_refuse_shared_memory_in_one_clear_error(env_id: str) -> None:
    """With shared memory (AsyncVectorEnv's default) Gymnasium 1.x would return padding for every Text
    observation; the text views' space makes that an error that names the fix, before any worker starts."""
    with pytest.raises(TypeError, match=r"vector_kwargs=\{'shared_memory': False\}"):
        gym.make_vec(env_id, num_envs=2, vectorization_mode="async")
    space = gym.make(env_id).observation_space
    assert isinstance(space, gym.spaces.Text)  # still a Text space to every other tool
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")  # sync vectors never used shared memory
    try:
        assert all(o.strip() for o in envs.reset(seed=[1, 2])[0])
    finally:
        envs.close()


def test_sync_vector_env_with_oracle_actions() -> None:
    """Drive a SyncVectorEnv with each sub-env's oracle: every finished episode returns 1."""
    envs = gym.make_vec("rods/ToolChain-Medium-Structured-v0", num_envs=2, vectorization_mode="sync")
    envs.reset(seed=[5, 6])
    returns, running = [], np.zeros(2)
    done = np.zeros(2, bool)
    for _ in range(150):
        actions = np.stack([envs.action_space.sample()[i] if done[i] else e.unwrapped.oracle_action()
                            for i, e in enumerate(envs.envs)])
        _, reward, term, trunc, _ = envs.step(actions)
        running += np.where(done, 0.0, reward)  # the step after an end is the auto-reset
        finished = (term | trunc) & ~done
        returns += [float(r) for r in running[finished]]
        assert not np.any(trunc & ~done)
        running[finished] = 0.0
        done = term | trunc
    envs.close()
    assert len(returns) >= 6
    assert returns == pytest.approx([1.0] * len(returns))


@pytest.mark.parametrize("mode", MODES)
def test_return_equals_final_progress(mode: str, easy_tasks) -> None:
    """Partial episodes: the sum of rewards equals the progress reached (dense Phi differences)."""
    env = ToolChainEnv(mode=mode, task_set=easy_tasks)
    rng = np.random.default_rng(0)
    seen = set()
    for task in easy_tasks[:25]:
        env.reset(options={"task": task})
        n_oracle = int(rng.integers(0, len(task.calls) + 1))
        total, info = 0.0, {}
        for _ in range(n_oracle):  # some correct steps ...
            _, r, term, trunc, info = env.step(env.oracle_action())
            total += r
            if term or trunc:
                break
        else:  # ... then give up with a final reply
            while not env.episode.done:
                action = env.encode(rods_gym.Reply("I am done."))
                _, r, term, trunc, info = env.step(action)
                total += r
        assert total == pytest.approx(info["progress"], abs=1e-9)
        assert 0.0 <= total <= 1.0
        seen.add(round(total, 3))
    assert len(seen) >= 3  # zero, partial and full progress all occur


def test_error_penalties_and_success_bonus(easy_tasks) -> None:
    task = easy_tasks[0]
    cfg = RewardConfig(error_penalty={"malformed": 0.25, "unknown_tool": 0.1}, success_bonus=0.5)
    env = ToolChainEnv(mode="chat", task_set=[task], reward=cfg)
    env.reset(options={"task": task})
    _, r1, *_ , i1 = env.step("<tool_call>{oops</tool_call>")
    _, r2, *_ , i2 = env.step('{"name": "no_such_tool", "arguments": {}}')
    _, r3, *_ , i3 = env.step("Could you wait a moment?")
    assert (i1["error"], i2["error"], i3["error"]) == ("malformed", "unknown_tool", "none")
    assert (r1, r2, r3) == (pytest.approx(-0.25), pytest.approx(-0.1), 0.0)
    ret, info, term, _ = run_oracle(env)
    assert term and info["success"]
    assert ret == pytest.approx(1.5)  # progress 1 plus the bonus
    with pytest.raises(ValueError, match="unknown error class"):
        RewardConfig(error_penalty={"typo": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        RewardConfig(error_penalty={"malformed": -1.0})


def test_default_reward_has_no_shaping(easy_tasks) -> None:
    env = ToolChainEnv(mode="chat", task_set=easy_tasks[:1])
    env.reset(options={"task": easy_tasks[0]})
    _, r, *_ = env.step("not a tool call but not a question either {")
    assert r == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_info_fields(mode: str, easy_tasks) -> None:
    env = ToolChainEnv(mode=mode, task_set=easy_tasks)
    _, info = env.reset(seed=3)
    assert INFO_KEYS <= set(info)
    assert info["progress"] == 0.0 and info["success"] is False and info["error"] == "none"
    assert info["turn"] == 0 and info["step"] == 0 and info["task_id"] == env.task.id
    assert info["signature"] == rods_gym.compute_signature(env.task, env.suite).wl_hash
    if mode == "chat":
        assert info["new_messages"] == [{"role": "user", "content": env.task.turns[0].message}]
        assert env.messages[0]["role"] == "system" and env.messages[1] == info["new_messages"][0]
        assert [t["function"]["name"] for t in env.tools] == list(env.task.tools)
    _, _, _, _, info = env.step(env.oracle_action())
    assert INFO_KEYS <= set(info) and info["step"] == 1 and info["error"] == "none"
    if mode == "chat":
        assert info["new_messages"][0]["role"] == "tool"
        assert env.messages[-1] == info["new_messages"][-1]


def test_truncation_at_max_steps(easy_tasks) -> None:
    env = ToolChainEnv(mode="compact", task_set=easy_tasks, max_steps=3)
    env.reset(seed=0)
    flags = [env.step("ask")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    _, r, term, trunc, info = env.step("ask")  # acting after the end
    assert info["error"] == "episode_over" and term and not trunc and r == 0.0
    # the default limit scales with the task
    env = ToolChainEnv(mode="chat", task_set=easy_tasks)
    env.reset(options={"task": easy_tasks[0]})
    t = easy_tasks[0]
    assert env.episode.max_steps == 8 + 3 * len(t.calls) + 2 * len(t.turns)
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="max_steps must be a positive int"):
            ToolChainEnv(mode="compact", task_set=easy_tasks, max_steps=bad)
    assert ToolChainEnv(mode="compact", task_set=easy_tasks, max_steps=np.int64(4)).max_steps == 4


def test_reset_seeding_and_options(easy_tasks, suite) -> None:
    env = ToolChainEnv(mode="chat", difficulty="medium")
    ids = [env.reset(seed=s)[1]["task_id"] for s in (4, 4, 5)]
    assert ids[0] == ids[1] != ids[2]
    task = easy_tasks[2]
    assert env.reset(options={"task": task})[1]["task_id"] == task.id
    assert env.reset(options={"task": task.to_dict()})[1]["task_id"] == task.id
    env2 = ToolChainEnv(mode="chat", task_set=easy_tasks)
    assert env2.reset(options={"task": task.id})[1]["task_id"] == task.id
    with pytest.raises(KeyError, match="no task with id"):
        env2.reset(options={"task": "nope"})
    with pytest.raises(ValueError, match="unknown reset options"):
        env2.reset(options={"tsk": task})
    with pytest.raises(TypeError, match="reset options must be a dict such as .*, not str"):
        env2.reset(options="test")  # not read letter by letter as options 't', 'e', 's'
    assert env2.reset(options={"task": task.id})[1]["task_id"] == task.id  # and the env still works
    dev = rods_gym.load_split("dev")
    _, info = env.reset(seed=1, options={"split": "dev"})
    assert info["task_id"] in {t.id for t in dev}
    # a task id with its split, on an env that has not loaded that split yet; and without a split
    test_id = rods_gym.load_split("test")[1].id
    for options in ({"task": test_id, "split": "test"}, {"task": test_id}):
        assert ToolChainEnv(mode="compact").reset(options=options)[1]["task_id"] == test_id
    with pytest.raises(KeyError, match=f"no task with id '{test_id}' in split 'dev'"):
        env.reset(options={"task": test_id, "split": "dev"})  # not silently the test task
    with pytest.raises(ValueError, match="unknown split"):
        env.reset(options={"task": test_id, "split": "tset"})
    with pytest.raises(RuntimeError, match=r"call reset\(\) before oracle_action"):
        ToolChainEnv(mode="chat").oracle_action()
    with pytest.raises(ValueError, match="unknown mode"):
        ToolChainEnv(mode="pixels")
    with pytest.raises(ValueError, match="unknown difficulty"):
        ToolChainEnv(difficulty="brutal")


@pytest.mark.parametrize("mode", MODES)
def test_render_ansi_and_human(mode: str, easy_tasks, capsys) -> None:
    env = ToolChainEnv(mode=mode, task_set=easy_tasks, render_mode="ansi")
    assert env.render() is None  # nothing to show before reset
    env.reset(options={"task": easy_tasks[0]})
    env.step(env.oracle_action())
    text = env.render()
    assert isinstance(text, str) and text
    if mode != "compact":
        assert easy_tasks[0].turns[0].message in text
    assert easy_tasks[0].calls[0].tool in text
    human = ToolChainEnv(mode=mode, task_set=easy_tasks, render_mode="human")
    human.reset(options={"task": easy_tasks[0]})
    human.step(human.oracle_action())
    capsys.readouterr()
    assert human.render() is None  # human mode prints instead of returning
    assert capsys.readouterr().out == text + "\n"


def test_structured_action_masks(easy_tasks, suite) -> None:
    env = ToolChainEnv(mode="structured", task_set=easy_tasks)
    obs, _ = env.reset(options={"task": easy_tasks[0]})
    masks = env.action_masks()
    nvec = env.action_space.nvec
    assert masks.dtype == bool and masks.shape == (int(nvec.sum()),)
    tool_mask = masks[3 : 3 + nvec[1]]
    assert {suite.tool_names[i] for i in np.flatnonzero(tool_mask)} == set(easy_tasks[0].tools)
    assert np.array_equal(tool_mask.astype(np.int8), obs["available"])
    with pytest.raises(AttributeError):
        ToolChainEnv(mode="chat").action_masks()


def test_custom_sampler_config_and_suite(library_suite) -> None:
    from conftest import LIBRARY_TOOLS

    env = ToolChainEnv(mode="structured", suite=library_suite,
                       sampler_config=SamplerConfig(tools=LIBRARY_TOOLS, depth=(2, 2)))
    assert env.action_space.nvec[1] == len(library_suite.tools)
    for seed in range(5):
        env.reset(seed=seed)
        assert set(env.task.tools) <= set(LIBRARY_TOOLS)
        ret, info, term, _ = run_oracle(env)
        assert term and ret == pytest.approx(1.0)


def test_slot_table_keeps_stated_facts_and_a_results_own_values() -> None:
    """A full slot table evicts the oldest tool value, but never a value the user stated (even
    one a tool returned first) and, while older ones remain, no value of the current result."""
    from rods_gym.renderers import SlotTable

    table = SlotTable(4)
    table.add("A", "text", "tool")
    table.add("A", "text", "user")  # stated after a tool returned it: it keeps its slot now
    for v in "BCD":
        table.add(v, "text", "tool")
    table.new_batch()
    table.add("D", "text", "tool")  # already there, and part of this result
    table.add("E", "text", "tool")
    table.add("F", "text", "tool")
    assert set(table.values) == {"A", "D", "E", "F"}  # B and C, the older values, made room
    table.new_batch()
    for v in "GHIJ":  # a result larger than the table: its own first value goes last
        table.add(v, "text", "tool")
    assert table.values[0] == "A" and set(table.values) == {"A", "H", "I", "J"}
    assert all(table.find(v) == k for k, v in enumerate(table.values))



def _slot_ids_in(text: str) -> list[int]:
    return [int(w[1:]) for w in text.split() if w.startswith("$") and w[1:].isdigit()]


def test_compact_shuffled_slot_ids(easy_tasks) -> None:
    """``slot_ids="shuffled"``: the ordered view's episode with its ids permuted, the permutation seeded
    by the task (any reset seed gives the same one), still solved by the oracle."""
    ordered = ToolChainEnv(mode="compact", task_set=easy_tasks)
    shuffled = ToolChainEnv(mode="compact", task_set=easy_tasks, slot_ids="shuffled")
    starts = set()
    for i, task in enumerate(easy_tasks[:12]):
        o_obs, _ = ordered.reset(seed=i, options={"task": task})
        s_obs, _ = shuffled.reset(seed=i, options={"task": task})
        assert _slot_ids_in(o_obs)[0] == 0  # ordered: the first value shown is $0
        # the same words, with ordered slot k shown as the permutation's id of k
        assert [w for w in o_obs.split() if not w.startswith("$")] == [w for w in s_obs.split() if not w.startswith("$")]
        perm = dict(zip(_slot_ids_in(o_obs), _slot_ids_in(s_obs)))
        assert len(set(perm.values())) == len(perm)
        assert all(shuffled.renderer.slot_token(k) == f"${shown}" for k, shown in perm.items())
        starts.add(tuple(_slot_ids_in(s_obs)))
        total, info, term, _ = run_oracle(shuffled)
        assert term and info["success"] and total == pytest.approx(1.0)
        again, _ = shuffled.reset(seed=i + 100, options={"task": task})
        assert again == s_obs  # the same task, the same permutation
    assert len(starts) > 1  # the ids change from episode to episode


def _typed_ids_in(text: str) -> list[str]:
    return [w for w in text.split() if w.startswith("$") and "." in w]


def test_compact_typed_slot_ids(easy_tasks) -> None:
    """``slot_ids="typed"``: the ordered view's episode with each value named ``$TYPE.RANK`` (its slot's
    type, and the lowest rank no other value of that type holds), one name per value for the whole
    episode, still solved by the oracle."""
    ordered = ToolChainEnv(mode="compact", task_set=easy_tasks)
    typed = ToolChainEnv(mode="compact", task_set=easy_tasks, slot_ids="typed")
    shared_type = 0
    for i, task in enumerate(easy_tasks[:20]):
        o_obs, _ = ordered.reset(seed=i, options={"task": task})
        t_obs, _ = typed.reset(seed=i, options={"task": task})
        assert [w for w in o_obs.split() if not w.startswith("$")] == [w for w in t_obs.split() if not w.startswith("$")]
        names: dict[int, str] = {}
        texts_o, texts_t = [o_obs], [t_obs]
        done = False
        while not done:
            action = ordered.oracle_action()
            words = [w for w in typed.oracle_action().split() if not w.startswith("$")]
            assert words == [w for w in action.split() if not w.startswith("$")]
            o_obs, _, o_term, o_trunc, _ = ordered.step(action)
            t_obs, reward, term, trunc, info = typed.step(typed.oracle_action())
            texts_o.append(o_obs)
            texts_t.append(t_obs)
            done = term or trunc
            assert (o_term, o_trunc) == (term, trunc)
        assert info["success"]
        for o_text, t_text in zip(texts_o, texts_t):  # ordered slot k is always shown with the same typed name
            for k, name in zip(_slot_ids_in(o_text), _typed_ids_in(t_text)):
                assert names.setdefault(k, name) == name
                vtype, rank = name[1:].rsplit(".", 1)
                assert vtype == typed.renderer.slots.types[k] and rank.isdigit()
        assert len(set(names.values())) == len(names)  # distinct values, distinct names
        by_type: dict[str, list[int]] = {}
        for name in names.values():
            vtype, rank = name[1:].rsplit(".", 1)
            by_type.setdefault(vtype, []).append(int(rank))
        assert all(sorted(r) == list(range(len(r))) for r in by_type.values())  # ranks 0, 1, ... per type
        shared_type += any(len(r) > 1 for r in by_type.values())
    assert shared_type  # some episode shows two values of one type (.0 and .1)


def test_compact_typed_ids_after_eviction(suite) -> None:
    """A value that takes over an evicted slot gets a typed name of its own: the evicted value's name
    is free again, and no name ever points at two values."""
    from rods_gym.renderers.base import SlotTable
    from rods_gym.renderers.compact import CompactRenderer
    r = CompactRenderer(suite, slot_ids="typed")
    r.slots = SlotTable(2)
    assert [r._slot(v, "email", "tool") for v in ("a@x.org", "b@x.org")] == ["$email.0", "$email.1"]
    r.slots.new_batch()
    assert r._slot("c@x.org", "email", "tool") == "$email.0"  # took over a@x.org's slot and its free rank
    assert r._value("$email.0") == "c@x.org" and r._value("$email.1") == "b@x.org"
    r.slots.new_batch()
    assert r._slot(7, "count", "tool") == "$count.0"  # evicts b@x.org
    assert r._value("$email.1").error == "invalid_arguments"  # b@x.org's name now names nothing


def test_slot_ids_option_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown slot_ids 'random'"):
        ToolChainEnv(mode="compact", slot_ids="random")
    with pytest.raises(ValueError, match="compact view only"):
        ToolChainEnv(mode="chat", slot_ids="shuffled")
    check_env(ToolChainEnv(mode="compact", slot_ids="shuffled"), skip_render_check=True)
    check_env(ToolChainEnv(mode="compact", slot_ids="typed"), skip_render_check=True)
    env = gym.make("rods/ToolChain-Compact-v0", slot_ids="shuffled")
    assert env.unwrapped.renderer.slot_ids == "shuffled"


def test_info_effect_says_what_each_action_did() -> None:
    """``info["effect"]``: every oracle action of the checked-in train tasks does something the task needs
    (progress where it earns reward; else reveals facts, unlocks tools or moves to the next turn), while a
    rejected call, an ask with nothing to add and a final reply without the answer are told apart."""
    from rods_gym.env import load_split
    from rods_gym.episode import EFFECTS

    tasks = load_split("train")[:120]
    env = ToolChainEnv(mode="compact", task_set=tasks)
    seen = set()
    for task in tasks:
        env.reset(options={"task": task})
        done = False
        while not done:
            _, r, term, trunc, info = env.step(env.oracle_action())
            assert info["effect"] in EFFECTS[1:5], (task.id, info)
            assert (info["effect"] == "progress") == (r > 0), (task.id, info, r)
            seen.add(info["effect"])
            done = term or trunc
    assert seen == {"progress", "revealed", "unlocked", "turn"}  # the train tasks exercise every kind
    task = next(t for t in tasks if len(t.turns) == 1 and not t.turns[0].withheld and not t.turns[0].locked)
    env.reset(options={"task": task})
    assert env.step("call no_such_tool")[4]["effect"] == "rejected"
    assert env.step("ask")[4]["effect"] == "none"  # nothing withheld: nothing to add
    _, _, term, _, info = env.step("reply")
    assert term and info["effect"] == "none" and not info["success"]


def test_render_rgb_array_and_human_structured(easy_tasks, capsys) -> None:
    """``rgb_array`` draws the transcript on frames of one fixed shape; ``human`` prints readable text in every
    view (the structured one's arrays never), each step only what the transcript gained."""
    env = ToolChainEnv(mode="structured", task_set=easy_tasks, render_mode="rgb_array")
    env.reset(options={"task": easy_tasks[0]})
    first = env.render()
    env.step(env.oracle_action())
    second = env.render()
    assert first.shape == second.shape == (480, 640, 3) and first.dtype == np.uint8
    assert (second < 128).sum() > (first < 128).sum() > 0  # more text, more ink
    human = ToolChainEnv(mode="structured", task_set=easy_tasks, render_mode="human")
    human.reset(options={"task": easy_tasks[0]})
    shown_at_reset = capsys.readouterr().out
    human.step(human.oracle_action())
    shown_at_step = capsys.readouterr().out
    assert easy_tasks[0].turns[0].message in shown_at_reset
    assert easy_tasks[0].calls[0].tool in shown_at_step and easy_tasks[0].turns[0].message not in shown_at_step
    assert "array(" not in shown_at_step and "available" not in shown_at_step
    with pytest.raises(ValueError, match="unknown render_mode 'pixels'"):
        ToolChainEnv(render_mode="pixels")


def test_configs_as_dicts_and_calls_before_reset(easy_tasks) -> None:
    """``reward`` and ``sampler_config`` take a dict of their fields (YAML's lists as ranges); anything else,
    or an unknown field, is a TypeError naming the argument; agent helpers before reset() say so."""
    env = gym.make("rods/ToolChain-Easy-v0", reward={"success_bonus": 2.0}, task_set=easy_tasks[:1])
    env.reset(seed=0)
    ret, info, term, _ = run_oracle(env)
    assert term and info["success"] and ret == pytest.approx(3.0)
    env = gym.make("rods/ToolChain-v0", sampler_config={"depth": [3, 3], "extra_calls": [0, 0]})
    assert env.unwrapped.sampler.config.depth == (3, 3)
    with pytest.raises(TypeError, match=r"reward: unknown field\(s\) \['bonus'\]; RewardConfig has error_penalty, success_bonus"):
        ToolChainEnv(reward={"bonus": 1.0})
    with pytest.raises(TypeError, match="sampler_config must be a SamplerConfig or a dict of its fields, not int"):
        ToolChainEnv(sampler_config=3)
    with pytest.raises(ValueError, match="SamplerConfig.depth"):
        ToolChainEnv(sampler_config={"depth": [0, 9]})
    fresh = ToolChainEnv(mode="structured")
    with pytest.raises(RuntimeError, match=r"call reset\(\) before action_masks"):
        fresh.action_masks()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before encode"):
        fresh.encode(None)
    with pytest.raises(ValueError, match="unknown split 'bogus'"):
        fresh.reset(options={"task": easy_tasks[0], "split": "bogus"})  # not silently ignored with a task


def test_an_answer_must_be_singled_out() -> None:
    """A final reply names the answer only if no other value of the answer's field that the tool results showed
    appears in it: listing every candidate (or pasting every result) does not count."""
    from rods_gym.env import load_split

    env = ToolChainEnv(mode="chat")
    found = None
    for task in (t for t in load_split("train") if t.answer is not None and len(t.turns) == 1):
        env.reset(options={"task": task})
        action = env.oracle_action()
        while action.startswith("<tool_call>"):
            env.step(action)
            action = env.oracle_action()
        if env.episode.other_answers:
            found = task
            break
    assert found is not None, "no train task whose tool results show competing values of its answer's field"
    other = sorted(env.episode.other_answers)[0]
    _, reward, term, _, info = env.step(f"It is {found.answer.value} or maybe {other}.")
    assert term and not info["success"] and reward == 0.0
    env.reset(options={"task": found})
    ret, info, term, _ = run_oracle(env)  # the oracle's reply names the answer alone
    assert term and info["success"] and ret == pytest.approx(1.0)
    assert found.answer.value in env.messages[-1]["content"]


@pytest.mark.parametrize(("text", "answer", "named"), [
    ("It is ORD-1.", "ORD-1", True), ("It is ORD-12.", "ORD-1", False), ("see xORD-1", "ORD-1", False),
    ("the email is JOSE@example.org", "jose@example.org", True),
    ("3 tickets", "3", True), ("13 tickets", "3", False), ("ORD-3", "3", False), ("3.5", "3", False),
    ("$1,234.00 in total", "1234", True), ("balance -2.5", "-2.5", True), ("Nan is the name", "Nan", True),
])
def test_contains_answer_takes_whole_values(text: str, answer: str, named: bool) -> None:
    """An answer is named by itself as a whole token, or by an equal number; never by a longer word or number
    that holds it (a reply ``$13`` does not give the count 3)."""
    from rods_gym.episode import _as_number, contains_answer

    assert contains_answer(text, answer, _as_number(answer)) is named
