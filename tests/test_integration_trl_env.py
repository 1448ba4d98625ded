"""rods_gym.integrations.trl_env: TRL's ``environment_factory`` on a rods chat env, on a CPU.

- the environment class's methods are the env's tools: transformers' ``get_json_schema`` (what TRL renders) gives
  back every suite and BFCL tool's name, description, parameters, types, enums and required list;
- 2 GRPO steps of TRL's own tool loop with the embedded byte-level model (warm-started on the oracle's tool-call
  conversations of the seed tasks): the env's ``get_reward`` is the reward TRL logged (and its advantages come from
  it), and the curriculum (RODS's detector and replay, over the seeds) observed every group with TRL's rewards;
- a task outside the class's tools, and an unbound trainer, fail with errors that say what to do.
"""

from __future__ import annotations

import inspect
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]' (trl, datasets)")
transformers = pytest.importorskip("transformers")
if tuple(int(x) for x in transformers.__version__.split(".")[:2]) < (5, 2):
    pytest.skip(f"TRL's environment_factory needs transformers >= 5.2 (installed: {transformers.__version__})",
                allow_module_level=True)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, TrainerCallback  # noqa: E402
from transformers.trainer_callback import PrinterCallback  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from rods_gym import load_split  # noqa: E402
from rods_gym.curricula import make_source  # noqa: E402
from rods_gym.integrations.tool_episode import USER_TOOL, suite_tools  # noqa: E402
from rods_gym.integrations.trl import SLOT_KEY  # noqa: E402
from rods_gym.integrations.trl_env import (CLASS_NAME, ToolEnvironment, TRLToolCurriculum,  # noqa: E402
                                           demonstration, environment_class, tool_calling_tokenizer,
                                           tool_list, warm_start)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
G, K = 4, 2
SEEDS = ("train-0000", "train-0003", "train-0015", "train-0023")  # one call each, over 3 tools
OPTIONS = dict(kappa_rule="fixed", kappa=0.05, capacity=16)
SYSTEM = "Call the tools; message_user to reply."  # short: CPU prompts
WARM_STEPS = 110


def seeds() -> list:
    tasks = {t.id: t for t in load_split("train")}
    return [tasks[i] for i in SEEDS]


def curriculum(source_name: str = "replay_only", **kw: Any) -> TRLToolCurriculum:
    tasks = seeds()
    options = OPTIONS if source_name != "fixed" else None
    return TRLToolCurriculum(make_source(source_name, tasks, seed=0, group_size=G, options=options),
                             "rods/ToolChain-Chat-v0", tasks_per_batch=K, group_size=G,
                             tools=sorted({x for t in tasks for x in t.tools}), system_prompt=SYSTEM, **kw)


@pytest.mark.parametrize("env_id", ["rods/ToolChain-Chat-v0", "rods/BFCL-MultiTurn-v0"])
def test_methods_render_the_tools_json_schemas(env_id: str) -> None:
    if "BFCL" in env_id:
        pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed: pip install --no-deps bfcl-eval")
    tools = suite_tools(env_id)
    cls = environment_class(tools)
    public = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_")]
    assert sorted(public) == sorted([t["function"]["name"] for t in tools] + ["get_reward", "reset"])
    for t in tools:
        want = t["function"]
        got = get_json_schema(getattr(cls, want["name"]))["function"]
        assert got["name"] == want["name"] and got["description"] == " ".join(want["description"].split())
        w, g = want["parameters"], got["parameters"]
        assert list(g.get("properties", {})) == [p for p in w["properties"] if p in w.get("required", [])] + \
            [p for p in w["properties"] if p not in w.get("required", [])]
        assert sorted(g.get("required", [])) == sorted(w.get("required", []))
        for name, spec in w["properties"].items():
            for key in ("type", "enum"):
                assert g["properties"][name].get(key) == spec.get(key), (want["name"], name, key)
            for key in ("pattern", "minimum", "maximum", "maxLength"):  # kept as text for the model
                if key in spec:
                    assert f"{key} " in g["properties"][name]["description"], (want["name"], name, key)


def tiny_model(vocab: int, pad: int, eos: int, bos: int) -> Any:
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = eos, pad
    return model


@pytest.fixture(scope="module")
def warm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model, warm-started on the oracle's conversations of the seeds, with a BPE tokenizer trained on
    them (a third of the byte-level tokens)."""
    torch.set_num_threads(1)
    cur = curriculum()
    env = cur.environment_factory()
    tools = tool_list(env)
    corpus = [tool_calling_tokenizer().apply_chat_template(demonstration(env, t), tools=tools, tokenize=False)
              for t in seeds()]
    tokenizer = tool_calling_tokenizer(corpus)
    model = tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id)
    losses = warm_start(model, tokenizer, cur, seeds(), steps=WARM_STEPS)
    assert losses[-1] < 0.5 * losses[0]
    path = tmp_path_factory.mktemp("warm_tool_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


class Record(TrainerCallback):
    """After each step (after the curriculum's callback): what TRL logged for the step's generation batch."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.steps: list[dict[str, list]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = self.trainer._logs
        self.steps.append({"slot": [p[-1][SLOT_KEY] for p in logs["prompt"]],
                           "reward": list(logs["rewards"][CLASS_NAME]), "advantage": list(logs["advantages"]),
                           "success": list(logs["extra"]["rods_success"]),
                           "tool_calls": list(self.trainer._metrics["train"]["tools/call_frequency"])})


def test_two_grpo_steps_through_environment_factory(warm_dir: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    rewards: list[float] = []
    real_reward = ToolEnvironment.get_reward
    monkeypatch.setattr(ToolEnvironment, "get_reward", lambda self: (rewards.append(real_reward(self)), rewards[-1])[1])
    cur = curriculum()
    observed: list = []
    inner = cur.schedule.source.observe
    cur.schedule.source.observe = lambda step, groups: (observed.append((step, list(groups))), inner(step, groups))[1]

    args = GRPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none", logging_steps=1,
                      disable_tqdm=True, seed=0, max_steps=2, per_device_train_batch_size=G * K, num_generations=G,
                      max_completion_length=384, max_tool_calling_iterations=3, temperature=1.0,
                      generation_kwargs={"max_new_tokens": 96}, shuffle_dataset=False, learning_rate=1e-3, beta=0.0,
                      save_strategy="no", log_level="error")
    record = Record()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = cur.build_trainer(AutoModelForCausalLM.from_pretrained(warm_dir), args,
                                    processing_class=AutoTokenizer.from_pretrained(warm_dir), callbacks=[record])
        record.trainer = trainer
        trainer.remove_callback(PrinterCallback)
        # TRL read the tools from the class: the restricted union, message_user included
        assert sorted(t.__name__ for t in trainer.tools) == sorted(cur.tool_names) and USER_TOOL in cur.tool_names
        trainer.train()

    # (a) the env's get_reward is the reward TRL logged, one per rollout, and the advantages come from it
    assert len(record.steps) == 2 and len(rewards) == 2 * G * K
    logged = [r for step in record.steps for r in step["reward"]]
    assert logged == pytest.approx(rewards)
    for step in record.steps:
        for g in range(0, G * K, G):
            group = torch.tensor(step["reward"][g:g + G])
            want = ((group - group.mean()) / (group.std() + 1e-4)).tolist()
            assert step["advantage"][g:g + G] == pytest.approx(want, abs=1e-4)
    assert any(r > 0 for r in rewards), f"the warm-started model solved nothing: {rewards}"
    assert any(a != 0 for step in record.steps for a in step["advantage"]), f"no group had a reward spread: {rewards}"
    assert all(step["tool_calls"][0] > 0 for step in record.steps)  # TRL's tool loop called the env's methods

    # (b) the curriculum observed every group, with the rewards TRL logged, in slot order
    assert [step for step, _ in observed] == [0, 1]
    for (batch, groups), step in zip(observed, record.steps):
        assert [len(g.returns) for g in groups] == [G] * K
        for pos, group in enumerate(groups):
            slot = cur.schedule.slots(batch)[pos]
            assert list(group.returns) == pytest.approx([r for s, r in zip(step["slot"], step["reward"]) if s == slot])
            assert list(group.successes) == [s for sl, s in zip(step["slot"], step["success"]) if sl == slot]
    assert cur.schedule.telemetry()["batches_observed"] == 2.0


def test_misuse_fails_with_a_clear_error(tmp_path: Path) -> None:
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = tool_calling_tokenizer()
    outside = next(t for t in load_split("train") if "get_account" not in t.tools)
    cur = TRLToolCurriculum(make_source("fixed", [outside], group_size=G), tasks_per_batch=K, group_size=G,
                            tools=["get_account"])
    assert cur.tool_names == ["get_account", USER_TOOL]
    with pytest.raises(ValueError, match="outside this environment class's tools"):
        cur.environment_factory().reset(prompt=[{"role": "user", "content": "", SLOT_KEY: 0}])
    with pytest.raises(ValueError, match="not tools of"):
        TRLToolCurriculum(make_source("fixed", seeds(), group_size=G), tasks_per_batch=K, group_size=G,
                          tools=["no_such_tool"])

    cur = curriculum("fixed")
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1, disable_tqdm=True,
                      per_device_train_batch_size=G * K, num_generations=G, shuffle_dataset=False,
                      max_completion_length=32, generation_kwargs={"max_new_tokens": 8}, save_strategy="no")
    model = tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=cur.dataset(args),
                              reward_funcs=cur.reward_funcs, environment_factory=cur.environment_factory,
                              callbacks=[cur.callback()])
        trainer.remove_callback(PrinterCallback)
        with pytest.raises(RuntimeError, match="bind"):  # built by hand and never bound
            trainer.train()
