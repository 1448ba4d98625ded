"""rods_gym.integrations.verl*: the RODS curriculum as verl's curriculum sampler, the slot dataset, the agent loop.

verl 0.9.1 imports on a CPU (``pip install --no-deps verl==0.9.1`` plus ray, tensordict, torchdata, hydra-core,
codetiming, dill, pylatexenc, cachetools, uvicorn, fastapi; see examples/verl/README.md). Where it does, the
batches are verl's own ``DataProto`` (collated by verl's ``collate_fn``, repeated G times as its trainer
does), the data loader is torchdata's ``StatefulDataLoader`` (as in verl's trainer, which saves its state in
each checkpoint's data.pt), the agent loop runs on verl's ``AgentLoopBase`` and Continuous Token builder with
a scripted server in place of the LLM server, and the verl 0.9 trainer hook is exercised without workers.
Where verl does not import, those tests skip with the reason, and the sampler's logic is tested through a
thin shim batch with the same fields (``batch["token_level_scores"]``, ``non_tensor_batch["rods_slot"]``).
verl 0.9 has no ``AbstractCurriculumSampler`` (verl 0.8 removed it), so the sampler's base is the module's
shim of that interface in both cases; with verl 0.4-0.7 it would be verl's class.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from rods_gym import TaskSpec, compute_signature, default_suite, load_split
from rods_gym.integrations.episodes import TextEpisode, make_text_env
from rods_gym.integrations.verl import SAMPLER_BASE, AbstractCurriculumSampler, RODSCurriculumSampler, RODSTaskDataset

ENV_ID = "rods/ToolChain-Chat-v0"
G, K = 4, 2
RODS = {"kappa_rule": "fixed", "kappa": 0.05, "synth_every": 1, "staged_frac": 0.5, "parents_per_round": 2,
        "variants_per_parent": 2, "capacity": 64}


def verl_importable() -> str | None:
    """None when verl 0.9's modules this test uses import here, else why not."""
    if importlib.util.find_spec("verl") is None:
        return "verl is not installed (examples/verl/README.md: the CPU install used for these tests)"
    try:
        import verl.experimental.agent_loop.agent_loop  # noqa: F401
        import verl.trainer.ppo.ray_trainer  # noqa: F401
        from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: F401
    except Exception as exc:  # any missing dependency of verl's imports
        return f"verl does not import on this machine: {type(exc).__name__}: {exc}"
    return None


VERL_MISSING = verl_importable()
needs_verl = pytest.mark.skipif(VERL_MISSING is not None, reason=str(VERL_MISSING))


@pytest.fixture(scope="module")
def seeds() -> list:
    suite = default_suite()
    return [t for t in load_split("train") if compute_signature(t, suite).depth == 1][:8]


def data_config(**rods: Any) -> dict[str, Any]:
    return {"train_batch_size": K, "dataloader_num_workers": 0,
            "rods": {"group_size": G, "steps": 3, "source": "rods", "seed": 0, "options": dict(RODS), **rods}}


def play(task: Any, solve: bool) -> tuple[float, bool]:
    """One chat-view episode of ``task``: the oracle's actions, or a call of an unknown tool and a reply."""
    ep = TextEpisode(make_text_env(ENV_ID))
    ep.start(task)
    if solve:
        while not ep.done:
            ep.act(ep.env.unwrapped.oracle_action())
    else:
        ep.act('<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>')
        if not ep.done:
            ep.act("I am done.")
    return ep.ret, ep.success


def episodes(rows: list[dict[str, Any]]) -> tuple[list[int], list[float], list[bool]]:
    """G episodes per row, every other one solved: (slot, return, success) in verl's interleaved order."""
    slots, returns, successes = [], [], []
    for row in rows:
        task = TaskSpec.from_json(row["extra_info"]["rods_task"])
        for i in range(G):
            ret, ok = play(task, solve=i % 2 == 0)
            slots.append(int(row["rods_slot"]))
            returns.append(ret)
            successes.append(ok)
    return slots, returns, successes


class ShimBatch:
    """The two fields of verl's DataProto the sampler reads (for machines without verl)."""

    def __init__(self, slots: list[int], returns: list[float], successes: list[bool]) -> None:
        scores = torch.zeros(len(returns), 5)
        scores[:, -1] = torch.tensor(returns)  # verl puts an agent loop's reward_score on the last response token
        self.batch = {"token_level_scores": scores}
        self.non_tensor_batch = {"rods_slot": np.array(slots, dtype=object),
                                 "rods_success": np.array(successes, dtype=object)}


def verl_batch(collated: dict[str, Any], returns: list[float], successes: list[bool]) -> Any:
    """What verl 0.9's RayPPOTrainer has after a step: the collated rows repeated G times (interleaved) without the
    columns it moves to the generation batch (all but data_source, reward_model, extra_info, uid), with the scores
    and the agent loop's extra fields."""
    from verl import DataProto

    batch = DataProto.from_single_dict(collated)
    batch.pop(non_tensor_batch_keys=[k for k in batch.non_tensor_batch if k not in ("data_source", "extra_info")])
    batch = batch.repeat(repeat_times=G, interleave=True)
    scores = torch.zeros(len(returns), 5)
    scores[:, -1] = torch.tensor(returns)
    extra = DataProto.from_dict(tensors={"token_level_scores": scores},
                                non_tensors={"rods_success": np.array(successes, dtype=object)})
    return batch.union(extra)


def rows_of(collated: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a batch collated by verl's collate_fn (non-tensor fields are object arrays)."""
    return [{k: collated[k][i] for k in ("rods_slot", "extra_info")} for i in range(len(collated["rods_slot"]))]


def check_served_variant(sampler: RODSCurriculumSampler, dataset: RODSTaskDataset, rows0: list) -> None:
    """After batch 0 was observed: its tasks were boundary (every other episode solved), so batch 1 has a variant."""
    parents = {TaskSpec.from_json(r["extra_info"]["rods_task"]).id for r in rows0}
    batch1 = [TaskSpec.from_json(dataset[s]["extra_info"]["rods_task"]) for s in sampler.schedule.slots(1)]
    assert any(t.meta.get("parent") in parents and t.meta.get("source") == "resample" for t in batch1), \
        [t.meta for t in batch1]


def test_sampler_update_and_iter_through_the_shim(seeds: list) -> None:
    """Without verl: the sampler's interface and logic, on a torch DataLoader and a shim batch from real episodes."""
    dataset = RODSTaskDataset.from_tasks(seeds, ENV_ID)
    sampler = RODSCurriculumSampler(dataset, data_config())
    assert isinstance(sampler, AbstractCurriculumSampler) or SAMPLER_BASE == "verl"
    assert len(sampler) == 3 * K and dataset[0]["rods_slot"] == 0  # bound: item s is slot s
    loader = DataLoader(dataset, batch_size=K, sampler=sampler, collate_fn=lambda rows: rows)
    it = iter(loader)
    rows0 = next(it)
    assert [r["rods_slot"] for r in rows0] == [0, 1] and all(r["agent_name"] == "rods_env" for r in rows0)
    slots, returns, successes = episodes(rows0)
    assert 0.0 in returns and 1.0 in returns
    sampler.update(ShimBatch(slots, returns, successes))
    assert sampler.schedule.observed_batches == 1
    assert sampler.telemetry()["boundary_fraction"] == 1.0
    check_served_variant(sampler, dataset, rows0)
    rows1 = next(it)
    assert [r["rods_slot"] for r in rows1] == [2, 3]
    # a resumed sampler (state_dict -> load_state_dict) continues with the same slots and tasks
    fresh = RODSCurriculumSampler(RODSTaskDataset.from_tasks(seeds, ENV_ID), data_config())
    fresh.load_state_dict(sampler.state_dict())
    assert next(iter(fresh)) == 4
    assert fresh.schedule.state_dict() == sampler.schedule.state_dict()


def test_bad_batches_and_configs_are_named(seeds: list) -> None:
    dataset = RODSTaskDataset.from_tasks(seeds, ENV_ID)
    with pytest.raises(ValueError, match="dataloader_num_workers=2"):
        RODSCurriculumSampler(dataset, {**data_config(), "dataloader_num_workers": 2})
    with pytest.raises(ValueError, match=r"data.rods.steps is required"):
        RODSCurriculumSampler(dataset, {"train_batch_size": K, "rods": {"group_size": G}})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['kapa'\]"):
        RODSCurriculumSampler(dataset, data_config(options={"kapa": 0.1}))
    sampler = RODSCurriculumSampler(dataset, data_config())
    with pytest.raises(ValueError, match="rods_slot"):
        sampler.update(type("B", (), {"batch": {}, "non_tensor_batch": {}})())
    dataset[0], dataset[1]  # slots of batch 0 handed out
    with pytest.raises(ValueError, match="more than G=4"):
        sampler.update(ShimBatch([0] * 5 + [1] * 4, [0.0] * 9, [False] * 9))
    with pytest.raises(TypeError, match="RODSTaskDataset"):
        RODSCurriculumSampler(list(seeds), data_config())


def test_parquet_rows_read_back(seeds: list, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="writing parquet needs pyarrow (rods-gym[trl] or [verl] brings it)")
    from rods_gym.cli import main

    path = tmp_path / "train.parquet"
    assert main(["tasks", "--split", "train", "-n", "6", "--to-parquet", str(path)]) == 0
    dataset = RODSTaskDataset(data_files=str(path), tokenizer=None, config={}, processor=None)
    assert [t.id for t in dataset.tasks] == [t.id for t in load_split("train")[:6]]
    row = dataset[2]  # unbound (a validation set): item i is row i, no slot
    assert "rods_slot" not in row and row["extra_info"]["task_id"] == dataset.tasks[2].id
    assert row["raw_prompt"][0]["role"] == "system" and row["raw_prompt"][-1]["role"] == "user"
    assert main(["tasks", "--split", "nope", "--to-parquet", str(path)]) == 2


@needs_verl
def test_sampler_with_verl_dataproto_and_stateful_loader(seeds: list) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.dataset.rl_dataset import collate_fn

    def loader_of(sampler: RODSCurriculumSampler) -> StatefulDataLoader:
        return StatefulDataLoader(dataset=sampler.data_source, batch_size=K, num_workers=0, drop_last=True,
                                  collate_fn=collate_fn, sampler=sampler)

    sampler = RODSCurriculumSampler(RODSTaskDataset.from_tasks(seeds, ENV_ID), data_config())
    loader = loader_of(sampler)
    it = iter(loader)
    collated = next(it)
    rows0 = rows_of(collated)
    slots, returns, successes = episodes(rows0)
    batch = verl_batch(collated, returns, successes)
    assert "rods_slot" not in batch.non_tensor_batch  # moved to the generation batch, as verl does
    assert [int(i["rods_slot"]) for i in batch.non_tensor_batch["extra_info"]] == slots  # verl's interleaved repeat
    sampler.update(batch)
    assert sampler.schedule.observed_batches == 1
    check_served_variant(sampler, sampler.data_source, rows0)
    state = loader.state_dict()  # what verl's trainer saves as data.pt after the step
    rows1 = rows_of(next(it))
    resumed = RODSCurriculumSampler(RODSTaskDataset.from_tasks(seeds, ENV_ID), data_config())
    again = loader_of(resumed)
    again.load_state_dict(state)
    rows1_again = rows_of(next(iter(again)))
    assert [int(r["rods_slot"]) for r in rows1_again] == [2, 3]
    assert [r["extra_info"]["task_id"] for r in rows1_again] == [r["extra_info"]["task_id"] for r in rows1]


@needs_verl
def test_verl_reads_the_parquet_and_builds_the_sampler_from_its_keys(seeds: list, tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rods_gym.cli import main
    from rods_gym.integrations.verl_trainer import curriculum_sampler
    from rods_gym.trainer.tokenization import build_chat_tokenizer

    path = tmp_path / "test.parquet"
    assert main(["tasks", "--split", "test", "-n", "3", "--to-parquet", str(path)]) == 0
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": False})
    row = RLHFDataset(data_files=[str(path)], tokenizer=build_chat_tokenizer(), config=cfg)[0]  # verl's own dataset
    assert row["agent_name"] == "rods_env" and row["extra_info"]["rods_task"]
    config = OmegaConf.create({**data_config(), "shuffle": False,
                               "sampler": {"class_path": "pkg://rods_gym.integrations.verl",
                                           "class_name": "RODSCurriculumSampler"}})
    sampler = curriculum_sampler(config, RODSTaskDataset.from_tasks(seeds, ENV_ID))
    assert isinstance(sampler, RODSCurriculumSampler) and len(sampler) == 3 * K


@needs_verl
def test_trainer_hook_updates_the_sampler_before_the_checkpoint(seeds: list, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from rods_gym.integrations.verl_trainer import RODSRayPPOTrainer

    sampler = RODSCurriculumSampler(RODSTaskDataset.from_tasks(seeds, ENV_ID), data_config())
    rows0 = [sampler.data_source[s] for s in sampler.schedule.slots(0)]
    slots, returns, successes = episodes(rows0)
    output = type("Out", (), {"meta_info": {"metrics": {"actor/loss": [0.1]}}})()
    calls: list[int] = []
    monkeypatch.setattr(RayPPOTrainer, "_update_actor", lambda self, batch: (calls.append(1), output)[1])
    trainer = RODSRayPPOTrainer.__new__(RODSRayPPOTrainer)  # the hook only, no Ray workers
    trainer.train_dataloader = DataLoader(sampler.data_source, batch_size=K, sampler=sampler)
    assert trainer._update_actor(ShimBatch(slots, returns, successes)) is output
    assert calls == [1] and sampler.schedule.observed_batches == 1
    assert output.meta_info["metrics"]["curriculum/boundary_fraction"] == [1.0]


@needs_verl
def test_agent_loop_runs_an_episode_with_verl_tokens(seeds: list) -> None:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.workers.rollout.replica import TokenOutput

    from rods_gym.integrations.rows import task_rows
    from rods_gym.integrations.verl_agent_loop import RODSAgentLoop
    from rods_gym.trainer.tokenization import build_chat_tokenizer

    tokenizer = build_chat_tokenizer()
    task = next(t for t in load_split("train") if len(t.calls) >= 2 and len(t.turns) == 1)

    class ScriptedServer:
        """In place of verl's LLM server: the oracle's next action (after one unknown-tool call), as token ids."""

        def __init__(self) -> None:
            self.shadow = TextEpisode(make_text_env(ENV_ID))
            self.shadow.start(task)
            self.generated: list[list[int]] = []

        async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any) -> TokenOutput:
            action = ('<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>' if not self.generated
                      else self.shadow.env.unwrapped.oracle_action())
            self.shadow.act(action)
            ids = tokenizer(action, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            self.generated.append(ids)
            return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))

    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 8192,
                                                              "multi_turn": {"max_assistant_turns": 12}}}, "data": {}})
    server = ScriptedServer()
    loop = RODSAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tokenizer, processor=None,
                         dataset_cls=RODSTaskDataset, data_config=DictConfigWrap(cfg.data), hf_model_type=None)
    row = task_rows([task], ENV_ID)[0]
    out = loop.loop.run_until_complete(loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], **row))
    assert out.reward_score == pytest.approx(1.0) and out.extra_fields["rods_success"] is True
    assert out.extra_fields["rods_task_id"] == task.id
    mask = out.response_mask
    assert len(mask) == len(out.response_ids) == len(out.response_logprobs)
    generated = sum(len(ids) for ids in server.generated)
    assert sum(mask) == generated  # every generated id is trained on, nothing else
    assert out.response_ids[: len(server.generated[0])] == server.generated[0]  # kept as generated
    env_text = tokenizer.decode([i for i, m in zip(out.response_ids, mask) if m == 0])
    assert "unknown_tool" in env_text  # the env's error observation came back as context (mask 0)
    assert out.num_turns == 2 * len(server.generated) + 1


@needs_verl
@pytest.mark.parametrize("launcher, nodes", [("run_single_node.sh", "1"), ("run_multi_node.sh", "2")])
def test_launch_recipes_pass_verls_config_validation(launcher: str, nodes: str, seeds: list, tmp_path: Path) -> None:
    """The exact arguments the launchers pass, composed with verl's ppo_trainer config and checked by verl."""
    import os
    import subprocess

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from rods_gym.integrations.rows import task_rows, write_parquet
    from rods_gym.integrations.verl_trainer import curriculum_sampler

    script = Path(__file__).resolve().parents[1] / "examples" / "verl" / launcher
    env = {**os.environ, "RODS_PRINT_ARGS": "1", "RODS_DATA": str(tmp_path), "NNODES": nodes}
    lines = subprocess.run(["bash", str(script), "trainer.save_freq=10"], env=env, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    options = dict(a[2:].split("=", 1) for a in lines if a.startswith("--"))
    overrides = [a for a in lines if not a.startswith("--")]
    with initialize_config_dir(config_dir=options["config-path"], version_base=None):
        cfg = compose(config_name=options["config-name"], overrides=overrides)
    OmegaConf.resolve(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.agent.default_agent_loop == "rods_env" and Path(rollout.agent.agent_loop_config_path).is_file()
    assert cfg.trainer.nnodes == int(nodes) and cfg.trainer.use_v1 is False and cfg.trainer.save_freq == 10
    assert cfg.data.rods.group_size == cfg.actor_rollout_ref.rollout.n
    write_parquet(task_rows(seeds, ENV_ID, "train"), cfg.data.train_files)
    dataset = RODSTaskDataset(data_files=cfg.data.train_files, tokenizer=None, config=cfg.data)
    sampler = curriculum_sampler(cfg.data, dataset)
    assert isinstance(sampler, RODSCurriculumSampler)
    assert len(sampler) == cfg.trainer.total_training_steps * cfg.data.train_batch_size
