"""Associative recall: how fast does a tiny model learn to fetch the value written after a key?

    python benchmarks/recall_probe.py --steps 1500
    python benchmarks/recall_probe.py --arch lfm2 --steps 500 --pairs 4

Every value the compact view's agent sends is a slot it read earlier, written after a field name
(``ok contact_id $2`` ... ``call get_contact contact_id $2``): multi-query associative recall, the
skill that induction heads implement. This probe trains a freshly initialised model on that skill
alone, in the cleanest form: ``k1 v1 k2 v2 ... kn vn | kq vq kq' vq' ...`` with random keys and
values, loss and accuracy on the queried values only (chance: 1 / ``--pairs`` once the model has
learned to answer with a value from the context). ``--arch llama`` is the embedded policy's
architecture and size (``policy.*`` of ``--config``); ``--arch lfm2`` the same width and depth as
``transformers``' LFM2 with short causal convolutions in every other layer, which hand each position
its previous token and so leave one attention layer to do the lookup (the Zoology/H3 finding).
Data come from one ``torch.Generator`` (``--seed``); the held-out batch is drawn first, so every
architecture is scored on the same sequences.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, Lfm2Config, Lfm2ForCausalLM

from rods_gym.trainer.config import load_config

ARCHS = ("llama", "lfm2")


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


def build_model(arch: str, vocab: int, hidden: int, intermediate: int, layers: int, heads: int,
                seed: int) -> torch.nn.Module:
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=512,
                  tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if arch == "llama":
            return LlamaForCausalLM(LlamaConfig(**common))
        if arch == "lfm2":
            types = ["conv" if i % 2 == 0 else "full_attention" for i in range(layers)]
            return Lfm2ForCausalLM(Lfm2Config(**common, layer_types=types, block_auto_adjust_ff_dim=False))
    raise ValueError(f"unknown arch {arch!r}; choose one of {ARCHS}")


def query_loss(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Cross-entropy on the queried values, and the share of them predicted exactly (argmax)."""
    logits = model(input_ids=ids).logits[:, :-1]
    targets, keep = ids[:, 1:], mask[:, 1:].bool()
    loss = F.cross_entropy(logits[keep], targets[keep])
    return loss, float((logits[keep].argmax(-1) == targets[keep]).float().mean())


def probe(arch: str, *, steps: int, pairs: int, hidden: int, intermediate: int, layers: int, heads: int, lr: float,
          batch: int = 32, queries: int = 6, keys: int = 200, values: int = 64, eval_every: int = 250,
          seed: int = 0) -> list[dict[str, Any]]:
    """Train one model; its held-out query accuracy every ``eval_every`` steps (and at the end)."""
    if steps < 1 or pairs < 1 or pairs > keys:
        raise ValueError(f"steps ({steps}) must be >= 1 and pairs ({pairs}) in [1, {keys}]")
    gen = torch.Generator().manual_seed(seed)
    held_ids, held_mask = recall_batch(256, pairs, queries, keys, values, gen)
    model = build_model(arch, keys + values + 1, hidden, intermediate, layers, heads, seed)
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
            rows.append({"arch": arch, "step": step, "loss": float(held_loss), "accuracy": acc,
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
    torch.set_num_threads(args.threads)
    pol = load_config(args.config).policy
    print(f"| arch | step | held-out query accuracy (chance {1 / args.pairs:.2f}) | loss | seconds |")
    print("|---|---|---|---|---|")
    for arch in (ARCHS if args.arch == "both" else (args.arch,)):
        for r in probe(arch, steps=args.steps, pairs=args.pairs, hidden=pol.hidden_size,
                       intermediate=pol.intermediate_size, layers=pol.num_layers, heads=pol.num_heads, lr=args.lr,
                       eval_every=args.eval_every, seed=args.seed):
            print(f"| {r['arch']} | {r['step']} | {r['accuracy']:.3f} | {r['loss']:.3f} | {r['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
