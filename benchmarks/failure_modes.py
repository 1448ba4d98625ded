"""Why a policy fails: greedy episodes classified, what follows a rejected call, and whether it can recover.

    python benchmarks/failure_modes.py runs/default/sft_policy
    python benchmarks/failure_modes.py runs/default/sft_policy runs/default/checkpoints/step-000060/policy --samples 8

For each policy (a ``save_pretrained`` directory), every task of the split is played once greedily
in the training config's evaluation environment and limits (``--config``, default the main job's; the chat
view's actions are read in the compact view's words, ``compact_form``):

- **outcomes**: success; failure without any rejected action (a wrong or early reply, or out of
  turns); failure after a rejected action, the episode ended by the policy or truncated. Across them,
  the failed episodes the policy ended with a reply while exactly one of the calls the task needs was
  unmade (the slip a teacher that skips the last call, ``sft.skip_last_call``, leaves in its imitator).
- **after a rejected action**, what the next action is: the same call again (the identical
  action text), the same tool with other arguments, another tool, a reply, a question, something
  malformed, or nothing (the episode ended there).
- **recovery**: from the state right after each greedy episode's first rejected action (the error
  observation read), ``--samples`` episodes continue sampled at ``--temperature`` (the prefix
  replayed in a fresh environment, ``RolloutEngine.run(branches=...)``). Reported: their success,
  the progress they add after the branch point, the share of their first actions that earn
  progress, and the share of branch points from which any continuation succeeds or the
  continuations' returns differ at all (what a GRPO group started there could learn from).
  ``--branch first-miss`` branches instead at the state *before* each failed greedy episode's
  first miss, an action rejected or without effect (``branch_before_first_miss``): how often
  sampling finds what greedy decoding missed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch

from rods_gym.episode import Ask, Reply, ToolCall
from rods_gym.renderers.chat import parse_chat_action
from rods_gym.trainer.rollout import RolloutEngine, Trajectory, branch_after_first_rejection, branch_before_first_miss

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])
from benchmarks._policy_eval import add_split_args, eval_engine, split_tasks  # noqa: E402

OUTCOMES = ("success", "failed, no rejected action", "failed after a rejection, ended",
            "failed after a rejection, truncated")
BRANCHES = {"first-rejection": "after the first rejection (turns left)",
            "first-miss": "before the first miss (rejected or no effect), failed episodes"}
NEXT = ("same call again", "same tool, other arguments", "another tool", "reply", "ask", "other (malformed)",
        "nothing (episode over)")


def outcome(tr: Trajectory) -> str:
    if tr.success:
        return OUTCOMES[0]
    if not any(tr.rejected):
        return OUTCOMES[1]
    return OUTCOMES[3] if tr.truncated else OUTCOMES[2]


SHORT = "ended by its reply with one call unmade"


def one_call_short(tr: Trajectory, last_action: str | None) -> bool:
    """Whether a failed episode was ended by the policy's reply (not truncated) with exactly one of the task's
    calls unmade. The answer, if the task has one, is a requirement apart: only the final reply can meet it."""
    if tr.success or tr.truncated or last_action is None or last_action.split()[:1] != ["reply"]:
        return False
    n = len(tr.task.calls) + (tr.task.answer is not None)
    answered = tr.task.answer is not None and bool(tr.rewards) and tr.rewards[-1] > 0
    return round(tr.progress * n) - answered == len(tr.task.calls) - 1


def next_kind(action: str, following: str | None) -> str:
    """What the action after a rejected ``action`` was (``following``: its text, None if there was none)."""
    if following is None:
        return NEXT[6]
    if following == action:
        return NEXT[0]
    words, before = following.split(), action.split()
    if words[:1] == ["call"] and len(words) > 1:
        return NEXT[1] if words[:2] == before[:2] else NEXT[2]
    return {"reply": NEXT[3], "ask": NEXT[4]}.get(words[0] if words else "", NEXT[5])


def compact_form(text: str) -> str:
    """A chat action in the compact view's words, so one classification reads both views: a tool call as
    ``call NAME {arguments as JSON}``, a question as ``ask ...``, a reply as ``reply ...``; anything malformed as
    it is."""
    action = parse_chat_action(text)
    if isinstance(action, ToolCall):
        return f"call {action.name} {json.dumps(action.arguments, sort_keys=True)}"
    if isinstance(action, Ask):
        return f"ask {action.text}"
    if isinstance(action, Reply):
        return f"reply {action.text}"
    return text


def action_texts(engine: RolloutEngine, tr: Trajectory) -> list[str]:
    """The episode's actions as the env read them (chat actions in their compact form, ``compact_form``)."""
    ids = tr.transcript.ids
    texts = [engine.codec.action_text(ids[a:b]) for a, b in tr.action_spans]
    return [compact_form(t) for t in texts] if engine.mode == "chat" else texts


def analyse(policy_dir: str | Path, tasks: Sequence[Any], *, config: str = "default", samples: int = 8,
            temperature: float = 0.7, seed: int = 0, overrides: Sequence[str] = (),
            branch: str = "first-rejection") -> dict[str, Any]:
    """Outcome shares, next-action counts after rejections and recovery figures of one policy."""
    engine = eval_engine(policy_dir, config, temperature, overrides)
    greedy, _ = engine.run(tasks, 1, greedy=True, seed=0)
    outcomes = Counter(outcome(tr) for tr in greedy)
    after: Counter[str] = Counter()
    for tr in greedy:
        texts = action_texts(engine, tr)
        outcomes[SHORT] += one_call_short(tr, texts[-1] if texts else None)
        for k, rejected in enumerate(tr.rejected):
            if rejected:
                after[next_kind(texts[k], texts[k + 1] if k + 1 < len(texts) else None)] += 1
    if branch not in BRANCHES:
        raise ValueError(f"branch {branch!r}: choose one of {sorted(BRANCHES)}")
    points = (branch_after_first_rejection(tr, engine.action_budget(tr.task)) if branch == "first-rejection"
              else branch_before_first_miss(tr) for tr in greedy)
    branches = [b for b in points if b is not None]
    recovery: dict[str, Any] = {"branch": branch, "branch_points": len(branches)}
    if branches and samples > 0:
        conts, _ = engine.run([b.task for b in branches], samples, seed=1_000_000, branches=branches,
                              generator=torch.Generator().manual_seed(seed))  # each in its episode's env options
        returns = np.array([c.ret for c in conts]).reshape(len(branches), samples)
        wins = np.array([c.success for c in conts]).reshape(len(branches), samples)
        first = np.array([bool(c.rewards) and c.rewards[0] > 0 for c in conts]).reshape(len(branches), samples)
        recovery.update(samples=samples, success=float(wins.mean()), progress_added=float(returns.mean()),
                        first_action_progress=float(first.mean()), any_first_action_progress=float(first.any(axis=1).mean()),
                        any_success=float(wins.any(axis=1).mean()), returns_differ=float((returns.std(axis=1) > 0).mean()))
    n = len(greedy)
    return {"policy": str(policy_dir), "tasks": n, "success": outcomes[OUTCOMES[0]] / n,
            "outcomes": {k: outcomes[k] / n for k in (*OUTCOMES, SHORT)}, "rejections": sum(after.values()),
            "after_rejection": {k: after[k] for k in NEXT}, "recovery": recovery}


def markdown(reports: Sequence[dict[str, Any]], temperature: float) -> str:
    names = [f"`{r['policy']}`" for r in reports]
    head = f"| greedy episodes, {reports[0]['tasks']} tasks | " + " | ".join(names) + " |\n|---|" + "---|" * len(reports)
    rows = [f"| {k} | " + " | ".join(f"{r['outcomes'][k]:.3f}" for r in reports) + " |" for k in (*OUTCOMES, SHORT)]
    rows.append("| rejected actions | " + " | ".join(str(r["rejections"]) for r in reports) + " |")
    rows += [f"| next: {k} | " + " | ".join(f"{r['after_rejection'][k] / max(r['rejections'], 1):.3f}" for r in reports)
             + " |" for k in NEXT]
    rows.append(f"| branch points ({BRANCHES[reports[0]['recovery']['branch']]}) | "
                + " | ".join(str(r["recovery"]["branch_points"]) for r in reports) + " |")
    for key, label in (("success", f"continuations at T={temperature:g}: success"),
                       ("progress_added", "continuations: progress added"),
                       ("first_action_progress", "continuations whose first action earns progress"),
                       ("any_first_action_progress", "branch points where one first action earns progress"),
                       ("any_success", "branch points with a successful continuation"),
                       ("returns_differ", "branch points whose continuations' returns differ")):
        rows.append(f"| {label} | " + " | ".join(f"{r['recovery'][key]:.3f}" if key in r["recovery"] else "-"
                                                 for r in reports) + " |")
    return head + "\n" + "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("policies", nargs="+", help="policy directories")
    add_split_args(ap, samples=8, samples_help="sampled continuations per branch point (0: none)",
                   out_help="also write the reports as JSON here")
    ap.add_argument("--branch", choices=sorted(BRANCHES), default="first-rejection",
                    help="where continuations start: after the first rejected action, or before the first miss "
                         "(an action rejected or without effect)")
    args = ap.parse_args(argv)
    if args.samples < 0 or args.temperature <= 0:
        ap.error("--samples must be >= 0 and --temperature > 0")
    torch.set_num_threads(args.threads)
    tasks = split_tasks(args)
    reports = [analyse(p, tasks, config=args.config, samples=args.samples, temperature=args.temperature,
                       seed=args.seed, overrides=args.set, branch=args.branch) for p in args.policies]
    print(markdown(reports, args.temperature))
    if args.out:
        Path(args.out).write_text(json.dumps(reports, indent=2))
    return reports


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
