"""Associative recall: how fast does a tiny model learn to fetch the value written after a key?

    python benchmarks/recall_probe.py --steps 1500
    python benchmarks/recall_probe.py --arch lfm2 --steps 500 --pairs 4

Every value the compact view's agent sends is a slot it read earlier, written after a field name
(``ok contact_id $2`` ... ``call get_contact contact_id $2``): multi-query associative recall, the
skill that induction heads implement. This probe trains a freshly initialised model on that skill
alone, in the cleanest form: ``k1 v1 k2 v2 ... kn vn | kq vq kq' vq' ...`` with random keys and
values, loss and accuracy on the queried values only (chance: 1 / ``--pairs`` once the model has
learned to answer with a value from the context). ``--arch llama`` is the embedded policy's
architecture and size (``policy.*`` of ``--config``, built by ``tiny_model_config``); ``--arch lfm2``
the same width and depth as ``transformers``' LFM2 (``policy.architecture: lfm2``), with short causal
convolutions in every other layer, which hand each position its previous token and so leave one
attention layer to do the lookup (the Zoology/H3 finding).
Data come from one ``torch.Generator`` (``--seed``); the held-out batch is drawn first, so every
architecture is scored on the same sequences.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from rods_gym.trainer.config import CHOICES, PolicyConfig, load_config
from rods_gym.trainer.policy import tiny_model_config

ARCHS = CHOICES[("policy", "architecture")]  # the embedded policy's architectures


def recall_batch(n: int, pairs: int, queries: int, keys: int, values: int,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of ``pairs`` (key, value) pairs, a separator, then ``queries`` (key, value)
    repeats of pairs drawn at random. Ids: 0 separator, 1..keys keys, keys+1..keys+values values.
    Returns (ids [n, T], mask [n, T]: 1 where the id is a queried value, the prediction target)."""
    rows, masks = [], []
    for _ in range(n):
        k = torch.randperm(keys, generator=generator)[:pairs] + 1
        v = torch.randint(0, values, (pairs,), generator=generator) + keys + 1
        seq = torch.stack([k, v], 1).flatten().tolist() + [0]
        mask = [0] * len(seq)
        for q in torch.randint(0, pairs, (queries,), generator=generator).tolist():
            seq += [int(k[q]), int(v[q])]
            mask += [0, 1]
        rows.append(seq)
        masks.append(mask)
    return torch.tensor(rows), torch.tensor(masks)


def build_model(policy: PolicyConfig, vocab: int, seed: int) -> torch.nn.Module:
    """The embedded policy's architecture and sizes (``policy``), over the probe's own vocabulary."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(tiny_model_config(replace(policy, max_positions=512), vocab))


def query_loss(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Cross-entropy on the queried values, and the share of them predicted exactly (argmax)."""
    logits = model(input_ids=ids).logits[:, :-1]
    targets, keep = ids[:, 1:], mask[:, 1:].bool()
    loss = F.cross_entropy(logits[keep], targets[keep])
    return loss, float((logits[keep].argmax(-1) == targets[keep]).float().mean())


def probe(policy: PolicyConfig, *, steps: int, pairs: int, lr: float, batch: int = 32, queries: int = 6,
          keys: int = 200, values: int = 64, eval_every: int = 250, seed: int = 0) -> list[dict[str, Any]]:
    """Train one model (``policy``'s architecture and sizes); its held-out query accuracy every
    ``eval_every`` steps (and at the end)."""
    if steps < 1 or pairs < 1 or pairs > keys:
        raise ValueError(f"steps ({steps}) must be >= 1 and pairs ({pairs}) in [1, {keys}]")
    gen = torch.Generator().manual_seed(seed)
    held_ids, held_mask = recall_batch(256, pairs, queries, keys, values, gen)
    model = build_model(policy, keys + values + 1, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rows, t0 = [], time.perf_counter()
    for step in range(1, steps + 1):
        loss, _ = query_loss(model, *recall_batch(batch, pairs, queries, keys, values, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                held_loss, acc = query_loss(model, held_ids, held_mask)
            rows.append({"arch": policy.architecture, "step": step, "loss": float(held_loss), "accuracy": acc,
                         "seconds": time.perf_counter() - t0})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=[*ARCHS, "both"], default="both")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--pairs", type=int, default=4, help="key-value pairs per sequence (chance 1/pairs)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default="default", help="training config whose policy.* sizes to use")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.eval_every < 1 or not 1 <= args.pairs <= 200 or args.lr <= 0:
        ap.error(f"--steps and --eval-every must be >= 1, --pairs in [1, 200] and --lr > 0; got --steps {args.steps}, "
                 f"--eval-every {args.eval_every}, --pairs {args.pairs}, --lr {args.lr}")
    torch.set_num_threads(args.threads)
    pol = load_config(args.config).policy
    print(f"| arch | step | held-out query accuracy (chance {1 / args.pairs:.2f}) | loss | seconds |")
    print("|---|---|---|---|---|")
    for arch in (ARCHS if args.arch == "both" else (args.arch,)):
        for r in probe(replace(pol, architecture=arch), steps=args.steps, pairs=args.pairs, lr=args.lr,
                       eval_every=args.eval_every, seed=args.seed):
            print(f"| {r['arch']} | {r['step']} | {r['accuracy']:.3f} | {r['loss']:.3f} | {r['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
