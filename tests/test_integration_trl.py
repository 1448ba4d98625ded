"""rods_gym.integrations.trl: TRL's GRPOTrainer on a rods env with the RODS curriculum, on a CPU.

An embedded tiny Llama (built from a config; tokenizer from the suite's compact vocabulary with its chat
template; nothing downloaded), warm-started for a few steps on the oracle's episodes of the seed tasks so
that its sampled episodes differ, then 2 GRPO steps of TRL: the env's returns must reach TRL's
advantages, the curriculum must observe every group with TRL's rewards (and no extra episode), and a
variant of a boundary task must be served at the next step. A resumed run must serve the same tasks.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl", reason="TRL is not installed: pip install -e '.[trl]' (trl, datasets)")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, TrainerCallback  # noqa: E402
from transformers.trainer_callback import PrinterCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from rods_gym import compute_signature, default_suite, load_split  # noqa: E402
from rods_gym.integrations.episodes import TextEpisode, make_text_env  # noqa: E402
from rods_gym.integrations.sources import make_source  # noqa: E402
from rods_gym.integrations.trl import SLOT_KEY, RODSCallback, TRLCurriculum, generations_needed  # noqa: E402
from rods_gym.trainer.policy import Policy, wrap  # noqa: E402
from rods_gym.trainer.tokenization import build_compact_tokenizer  # noqa: E402
from rods_gym.trainer.transcript import ChatCodec  # noqa: E402

ENV_ID = "rods/ToolChain-Compact-v0"
G, K = 8, 2  # rollouts per task, tasks per step
RODS_OPTIONS = dict(kappa_rule="fixed", kappa=0.05, synth_every=1, staged_frac=0.5, parents_per_round=2,
                    variants_per_parent=2, capacity=64)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def tiny_policy() -> Policy:
    tok = build_compact_tokenizer(default_suite())
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return wrap(model, tok, "tiny-compact")


def warm_start(policy: Policy, tasks: list, steps: int) -> None:
    """A few full-batch steps of imitation of the oracle's episodes (actions only), so that sampling varies."""
    codec, ep = ChatCodec(policy), TextEpisode(make_text_env(ENV_ID))
    seqs = []
    for task in tasks:
        messages, tools = ep.start(task)
        tr = codec.start(messages, tools)
        while True:
            action = ep.env.unwrapped.oracle_action()
            tr.add_action(codec.action_ids(action))
            step = ep.act(action)
            if step.done:
                break
            codec.continue_after_action(tr, ep.messages, step.n_new, ep.tools, True)
        seqs.append(tr)
    width = max(len(t) for t in seqs)
    ids = torch.full((len(seqs), width), policy.pad_id)
    att, mask = torch.zeros_like(ids), torch.zeros(len(seqs), width)
    for r, t in enumerate(seqs):
        ids[r, :len(t)], att[r, :len(t)] = torch.tensor(t.ids), 1
        mask[r, :len(t)] = torch.tensor(t.action_mask, dtype=torch.float)
    model = policy.model
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=att).logits[:, :-1].float(), -1)
        loss = -(logp.gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]).sum() / mask[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.fixture(scope="module")
def seeds() -> list:
    suite = default_suite()
    return [t for t in load_split("train") if compute_signature(t, suite).depth == 1][:8]


@pytest.fixture(scope="module")
def warm_dir(tmp_path_factory: pytest.TempPathFactory, seeds: list) -> Path:
    policy = tiny_policy()
    warm_start(policy, seeds, 40)
    path = tmp_path_factory.mktemp("warm")
    policy.model.save_pretrained(path)
    policy.tokenizer.save_pretrained(path)
    return path


class Record(TrainerCallback):
    """After each step (after RODSCallback): a copy of what TRL logged for the step's generation batch."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.steps: list[dict[str, list]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = self.trainer._logs
        self.steps.append({"prompt": [p[-1][SLOT_KEY] for p in logs["prompt"]],
                           "reward": list(logs["rewards"]["rods_env_reward"]), "advantage": list(logs["advantages"])})


def run_trl(warm_dir: Path, seeds: list, out: Path, steps: int, *, save: bool = False,
            resume: str | None = None) -> tuple[TRLCurriculum, Record, list, Any]:
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(warm_dir)
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    source = make_source("rods", seeds, seed=0, group_size=G, options=RODS_OPTIONS)
    observed: list = []
    inner = source.observe
    source.observe = lambda step, groups: (observed.append((step, list(groups))), inner(step, groups))[1]
    curriculum = TRLCurriculum(source, ENV_ID, tasks_per_batch=K, group_size=G, max_turns=4)
    rollouts: list = []
    rollout = curriculum.rollout

    def spy(prompts: list, trainer: Any) -> dict:
        result = rollout(prompts, trainer)
        rollouts.append(result)
        return result

    args = GRPOConfig(output_dir=str(out), use_cpu=True, report_to="none", logging_steps=1, disable_tqdm=True, seed=0,
                      max_steps=steps, per_device_train_batch_size=G * K, num_generations=G, max_completion_length=64,
                      generation_kwargs={"max_new_tokens": 16}, shuffle_dataset=False, learning_rate=1e-3, beta=0.0,
                      save_strategy="steps" if save else "no", save_steps=1, log_level="error")
    record = Record()
    trainer = GRPOTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=curriculum.dataset(args),
                          reward_funcs=curriculum.reward_funcs, rollout_func=spy,
                          callbacks=[curriculum.callback(), record])
    record.trainer = trainer
    trainer.remove_callback(PrinterCallback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=resume)
    return curriculum, record, observed, rollouts


def group_advantages(rewards: list[float]) -> list[float]:
    """TRL's default: (r - group mean) / (group std, unbiased, + 1e-4)."""
    out = []
    for g in range(0, len(rewards), G):
        group = torch.tensor(rewards[g:g + G])
        out += ((group - group.mean()) / (group.std() + 1e-4)).tolist()
    return out


def test_two_grpo_steps_feed_the_curriculum(warm_dir: Path, seeds: list, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[str] = []
    real_start = TextEpisode.start
    monkeypatch.setattr(TextEpisode, "start", lambda self, task, *a, **kw: (starts.append(task.id),
                                                                           real_start(self, task, *a, **kw))[1])
    curriculum, record, observed, rollouts = run_trl(warm_dir, seeds, tmp_path / "run", steps=2)

    # (a) the env's returns are TRL's rewards, and TRL's advantages are computed from them
    assert len(rollouts) == 2 and len(record.steps) == 2
    for result, logged in zip(rollouts, record.steps):
        assert logged["reward"] == pytest.approx(result["rods_return"])
        assert logged["advantage"] == pytest.approx(group_advantages(result["rods_return"]), abs=1e-4)
        assert all(0.0 <= r <= 1.0 for r in result["rods_return"])
        for ids, mask in zip(result["completion_ids"], result["env_mask"]):
            assert len(ids) == len(mask) and mask[-1] == 1  # the completion ends with generated tokens
    assert any(a != 0 for step in record.steps for a in step["advantage"]), "no group had a reward spread"

    # (b) the curriculum observed every group, with the rewards TRL logged, and ran no episode of its own
    assert [step for step, _ in observed] == [0, 1]
    for (step, groups), logged in zip(observed, record.steps):
        assert [len(g.returns) for g in groups] == [G] * K
        slots = curriculum.schedule.slots(step)
        for pos, group in enumerate(groups):
            logged_returns = [r for s, r in zip(logged["prompt"], logged["reward"]) if s == slots[pos]]
            assert list(group.returns) == pytest.approx(logged_returns)
    assert len(starts) == 2 * K * G  # one env episode per TRL completion, none for detection

    # (c) a boundary task of step 0 was resampled, and its variant served at step 1
    boundary = {g.task.id for g in observed[0][1] if 4 * torch.tensor(g.returns).var(unbiased=False) >= 0.05}
    assert boundary, f"no boundary task at step 0: returns {[g.returns for g in observed[0][1]]}"
    served = dict(curriculum.schedule.served)
    variants = [t for t in (g.task for g in observed[1][1]) if t.meta.get("parent") in boundary]
    assert variants and variants[0].id in served[1], (served, boundary)
    assert variants[0].meta.get("source") == "resample"


def test_resumed_run_serves_the_same_tasks(warm_dir: Path, seeds: list, tmp_path: Path) -> None:
    full, _, _, _ = run_trl(warm_dir, seeds, tmp_path / "full", steps=2, save=True)
    checkpoint = tmp_path / "full" / "checkpoint-1"
    state = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"][RODSCallback.__name__]
    assert state["attributes"]["curriculum"]["next_batch"] == 1  # saved after step 0's groups were observed
    resumed, record, observed, rollouts = run_trl(warm_dir, seeds, tmp_path / "full", steps=2,
                                                  resume=str(checkpoint))
    assert len(rollouts) == 1 and [step for step, _ in observed] == [1]  # only step 1 ran again
    assert dict(resumed.schedule.served)[1] == dict(full.schedule.served)[1]


def test_config_that_does_not_fit_is_refused(seeds: list) -> None:
    from trl import GRPOConfig

    curriculum = TRLCurriculum(make_source("fixed", seeds, group_size=4), ENV_ID, tasks_per_batch=2, group_size=4)
    args = GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", max_steps=2, per_device_train_batch_size=18,
                      num_generations=6, shuffle_dataset=True)
    with pytest.raises(ValueError) as err:
        curriculum.dataset(args)
    text = str(err.value)
    assert "num_generations=6" in text and "shuffle_dataset must be False" in text and "tasks_per_batch=2" in text
    with pytest.raises(ValueError, match="text view"):
        TRLCurriculum(make_source("fixed", seeds, group_size=4), "rods/ToolChain-Structured-v0", tasks_per_batch=2,
                      group_size=4)
    with pytest.raises(ValueError, match="not a rods-gym row"):
        curriculum.task_of([{"role": "user", "content": "hello"}])
    # one generation per optimizer step when TRL accumulates micro-batches (steps_per_generation = accumulation)
    assert generations_needed(10, 4, 4, 1) == 10 and generations_needed(10, 4, 4, 2) == 5
    good = GRPOConfig(output_dir="unused", use_cpu=True, report_to="none", max_steps=3, per_device_train_batch_size=2,
                      gradient_accumulation_steps=4, num_generations=4, shuffle_dataset=False)
    assert len(curriculum.dataset(good)) == 3 * 2  # 3 generations of 2 tasks
