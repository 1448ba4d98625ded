"""Train with TRL's own GRPOTrainer through ``environment_factory`` on a rods chat env: TRL's tool loop calls the
env's tools (methods of one class), ``get_reward`` is the env's return, and a rods-gym curriculum picks each step's
tasks from the group rewards TRL computed (``rods_gym.integrations.trl_env``).

    pip install torch==2.13.0 && pip install -e ".[all,trl]"
    python examples/trl_environment_factory.py                     # the embedded model, CPU, a few minutes
    python examples/trl_environment_factory.py --steps 2 --warm-steps 60         # a quick check
    python examples/trl_environment_factory.py --model Qwen/Qwen2.5-0.5B-Instruct --allow-download \\
        --source rods --tools all --seeds 400 --max-completion 2048 --bf16        # a chat model, on a GPU

The embedded model (a 2-layer Llama built from its config, nothing downloaded) cannot read the schemas of the
suite's 105 tools in every prompt on a CPU, so by default the example takes ``--seeds`` one-call train tasks,
offers only their tools (``--tools seeds``) and uses the ``replay_only`` curriculum (RODS's detector and replay
without synthesis: a synthesized task could need a tool outside the class). Its tokenizer is a byte-level BPE
trained on the oracle's conversations of the seeds, and it is warm-started by imitating them (``--warm-steps``), so
that its sampled episodes differ. A real chat model brings its own template: give it every tool (``--tools all``)
and the full RODS curriculum (``--source rods``).

Measured on a shared 2-core CPU (2026-12-07, commit 40a22c9): the defaults took 76 s, 51 s of it the warm start
(loss 6.68 -> 0.02) and 9 s the 10 GRPO steps; every step had groups with a reward spread (TRL's mean reward
0.25-0.75 over the step's two tasks, which the curriculum changes: not a learning curve), TRL's tool loop made
0.5-0.875 tool calls per rollout, and the curriculum observed all 10 batches.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental in trl 1.16

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as hf_logging
from trl import GRPOConfig

from rods_gym import load_split
from rods_gym.curricula import arm_names, make_source
from rods_gym.integrations.tool_episode import ToolEpisode, oracle_call
from rods_gym.integrations.trl_env import (CLASS_NAME, TRLToolCurriculum, demonstration, tool_calling_tokenizer,
                                           tool_list, warm_start)

SHOWN = ("reward", "reward_std", "frac_reward_zero_std", "tools/call_frequency", "tools/failure_frequency",
         "curriculum/boundary_fraction", "curriculum/batches_observed")


class StepTable(TrainerCallback):
    """One line per logged step: TRL's reward, its tool-loop metrics and the curriculum's telemetry."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
        if logs and "reward" in logs:
            cells = "  ".join(f"{k.removeprefix('curriculum/')} {float(logs[k]):.3f}" for k in SHOWN
                              if logs.get(k) is not None)
            print(f"step {state.global_step:3d}  {time.perf_counter() - self.t0:6.1f}s  {cells}", flush=True)


def one_call_tasks(n: int) -> list:
    """The first ``n`` train tasks the oracle solves with one tool call (short CPU episodes)."""
    episode, out = ToolEpisode("rods/ToolChain-Chat-v0"), []
    for task in load_split("train"):
        episode.start(task=task)
        calls = 0
        while not episode.done:
            episode.call(*oracle_call(episode))
            calls += 1
        if calls == 1:
            out.append(task)
        if len(out) == n:
            return out
    raise ValueError(f"only {len(out)} one-call tasks in the train split")


def embedded_model(curriculum: TRLToolCurriculum, seeds: list, steps: int) -> tuple:
    env = curriculum.environment_factory()
    tools = tool_list(env)
    corpus = [tool_calling_tokenizer().apply_chat_template(demonstration(env, t), tools=tools, tokenize=False)
              for t in seeds]
    tokenizer = tool_calling_tokenizer(corpus)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if steps > 0:
        t0 = time.perf_counter()
        losses = warm_start(model, tokenizer, curriculum, seeds, steps)
        print(f"warm start: {steps} steps on the oracle's conversations of {len(seeds)} tasks, loss "
              f"{losses[0]:.2f} -> {losses[-1]:.2f}, {time.perf_counter() - t0:.0f} s", flush=True)
    return model, tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny (embedded), a local save_pretrained directory or a hub name")
    ap.add_argument("--allow-download", action="store_true", help="let --model be downloaded from the hub")
    ap.add_argument("--env-id", default="rods/ToolChain-Chat-v0", help="a chat view (rods/BFCL-MultiTurn-v0, ...)")
    ap.add_argument("--source", choices=arm_names(), default="replay_only")
    ap.add_argument("--tools", choices=("seeds", "all"), default="seeds",
                    help="the class's tools: the seeds' (tiny model) or every tool of the env")
    ap.add_argument("--seeds", type=int, default=8, help="seed tasks (one-call train tasks with --tools seeds)")
    ap.add_argument("--steps", type=int, default=10, help="GRPO steps (optimizer steps)")
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4, help="G: rollouts per task")
    ap.add_argument("--max-completion", type=int, default=384, help="tokens of an episode after its prompt")
    ap.add_argument("--max-action", type=int, default=96, help="tokens of one generated turn")
    ap.add_argument("--max-tool-calls", type=int, default=4, help="TRL's max_tool_calling_iterations")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warm-steps", type=int, default=150, help="warm start of the tiny model (0: none)")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/trl_environment_factory")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames (gradient_checkpointing)
    t0 = time.perf_counter()

    seeds = one_call_tasks(args.seeds) if args.tools == "seeds" else load_split("train")[:args.seeds]
    G, K = args.group_size, args.tasks_per_step
    source = make_source(args.source, seeds, seed=args.seed, group_size=G, env_id=args.env_id,
                         options=None if args.source == "fixed" else {"kappa_rule": "fixed", "kappa": 0.05})
    tools = sorted({name for t in seeds for name in t.tools}) if args.tools == "seeds" else None
    curriculum = TRLToolCurriculum(source, args.env_id, tasks_per_batch=K, group_size=G, tools=tools)
    print(f"{len(seeds)} seed tasks, {len(curriculum.tool_names)} tools in the environment class "
          f"({CLASS_NAME}), curriculum {args.source}", flush=True)
    if args.model == "tiny":
        model, tokenizer = embedded_model(curriculum, seeds, args.warm_steps)
    else:
        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=not args.allow_download)
        model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=not args.allow_download,
                                                     dtype=torch.bfloat16 if args.bf16 else torch.float32)
    config = GRPOConfig(
        output_dir=args.out, report_to="none", logging_steps=1, disable_tqdm=True, seed=args.seed,
        max_steps=args.steps, per_device_train_batch_size=G * K, num_generations=G, shuffle_dataset=False,
        max_completion_length=args.max_completion, max_tool_calling_iterations=args.max_tool_calls,
        generation_kwargs={"max_new_tokens": args.max_action}, temperature=1.0, learning_rate=args.lr,
        lr_scheduler_type="constant", beta=0.0, loss_type="dapo", bf16=args.bf16,
        use_cpu=not torch.cuda.is_available(), save_strategy="no", log_level="warning")
    trainer = curriculum.build_trainer(model, config, processing_class=tokenizer, callbacks=[StepTable()])
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    tel = curriculum.schedule.telemetry()
    print(f"done in {time.perf_counter() - t0:.0f} s: {int(tel['batches_observed'])} batches observed by the "
          f"curriculum; served {[ids for _, ids in curriculum.schedule.served]}", flush=True)


if __name__ == "__main__":
    main()
