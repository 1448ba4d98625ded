"""Batched sampling for multi-turn episodes with one KV cache kept across turns.

A :class:`DecodeSession` holds the KV cache of every live episode of a rollout batch. Each
turn, ``extend`` feeds only the ids each episode gained since the last turn (the environment's
new messages), left-padded within that chunk; ``sample`` then draws one action per episode,
token by token. Padding inside the cache is masked out and position ids follow each row's
own count of real tokens, so every row computes exactly what it would alone, and nothing is
ever re-encoded. Finished episodes leave the batch (``keep``). The first ``extend`` encodes each
distinct prompt once and copies its KV cache to every row that starts with it (the G rollouts of
a GRPO group share their prompt), so a group's prompt costs one prefill, not G.

Each token is drawn from ``softmax(logits / temperature)`` with an explicit
``torch.Generator`` and its log-prob under that same distribution is recorded; the GRPO
update recomputes ``log_softmax(logits / temperature)`` of the stored ids, which equals it up
to float rounding (tests/test_rollout.py checks 1e-4 in fp32).

Models whose cache holds a recurrent state beside (or instead of) keys and values, such as
LFM2's short convolutions or Mamba-style layers, cannot take padding inside a row: a masked
position still shifts the state, so the tokens after it would be computed from the wrong
neighbours, and their cache rows cannot be selected or copied the way keys and values are. For
them (``recurrent``, read from the cache of the first forward) each ``extend`` encodes every
row's whole history afresh, left-padded, so that padding only ever precedes a row's first token,
where it stands for the zeros the model pads with anyway. That costs a prefill of the whole
context per turn instead of the new ids only; the sampled ids and their log-probs are exact
either way.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from transformers import DynamicCache, PreTrainedModel



@dataclass
class Generated:
    ids: list[int]
    logprobs: list[float]
    stopped: bool  # ended with a stop token (else: hit the length limit)


def forward_parameters(model: torch.nn.Module) -> frozenset[str]:
    """The named parameters of the forward of the causal LM inside ``model``: through a DDP wrapper
    (``.module``) and a peft model (whose forward passes ``**kwargs`` on to its base model's)."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    try:
        return frozenset(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):
        return frozenset()


def no_cache(model: torch.nn.Module) -> dict[str, bool]:
    """``use_cache=False`` for a training forward of a model that takes it: no KV cache is built (none is wanted,
    and gradient checkpointing refuses one)."""
    return {"use_cache": False} if "use_cache" in forward_parameters(model) else {}


def _cache_kwarg(model: PreTrainedModel) -> str:
    """``cache`` in transformers >= 5.2x, ``past_key_values`` before."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def holds_recurrent_state(cache: Any) -> bool:
    """Whether a model's ``cache`` keeps a per-row state that padding would corrupt (convolution or
    state-space layers): it has a linear-attention layer (transformers >= 5), or it is not a plain
    ``DynamicCache`` of keys and values (older versions, where hybrid models bring cache classes of
    their own)."""
    linear = getattr(cache, "is_linear", None)
    if linear is not None:
        return any(linear)
    return not isinstance(cache, DynamicCache)


class DecodeSession:
    """The KV cache of a batch of episodes; rows are episodes, in the order given at creation."""

    def __init__(self, model: PreTrainedModel, pad_id: int, n_rows: int) -> None:
        self.model = model
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self.key = _cache_kwarg(model)
        # only the last position's logits are needed; a model whose forward has no logits_to_keep computes them all
        self.last_only = {"logits_to_keep": 1} if "logits_to_keep" in forward_parameters(model) else {}
        self.cache: Any = None
        self.mask = torch.zeros((n_rows, 0), dtype=torch.long, device=self.device)
        self.next_pos = torch.zeros(n_rows, dtype=torch.long, device=self.device)
        self.pending: list[list[int]] = [[] for _ in range(n_rows)]  # sampled ids not yet fed
        self.logits: torch.Tensor | None = None  # [rows, vocab] next-token logits
        self.recurrent: bool | None = None  # read from the cache of the first forward
        self.history: list[list[int]] = [[] for _ in range(n_rows)]  # recurrent: every id each row has had

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    def _forward(self, ids: torch.Tensor, chunk_mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, chunk_mask], dim=1)
        kwargs = {} if self.cache is None else {self.key: self.cache}
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True,
                         **self.last_only, **kwargs)
        self.cache = _cache_of(out)
        return out.logits[:, -1]

    def _left_padded(self, chunks: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(c) for c in chunks)
        ids = torch.full((len(chunks), width), self.pad_id, dtype=torch.long)
        chunk_mask = torch.zeros((len(chunks), width), dtype=torch.long)
        for i, c in enumerate(chunks):
            ids[i, width - len(c):] = torch.as_tensor(c, dtype=torch.long)
            chunk_mask[i, width - len(c):] = 1
        return ids.to(self.device), chunk_mask.to(self.device)

    @torch.no_grad()
    def extend(self, new_ids: Sequence[Sequence[int]]) -> None:
        """Feed each row's new context ids (after its pending sampled id); every row needs at least one."""
        chunks = [list(p) + list(n) for p, n in zip(self.pending, new_ids)]
        if len(chunks) != self.rows or any(not c for c in chunks):
            raise ValueError("extend() needs one non-empty chunk per row")
        if self.recurrent:
            self.history = [h + c for h, c in zip(self.history, chunks)]
            self._encode_histories()
            return
        if self.cache is None:
            self._prefill(chunks)
            return
        ids, chunk_mask = self._left_padded(chunks)
        positions = self.next_pos[:, None] + (chunk_mask.cumsum(1) - 1).clamp(min=0)
        self.logits = self._forward(ids, chunk_mask, positions)
        self.next_pos = self.next_pos + chunk_mask.sum(1)
        self.pending = [[] for _ in range(self.rows)]

    def _prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        """The first chunk: each distinct prompt is encoded once, then its cache row, mask and
        next-token logits are copied to every row with that prompt."""
        first: dict[tuple[int, ...], int] = {}
        source = [first.setdefault(tuple(p), len(first)) for p in prompts]  # row -> its distinct prompt
        distinct = [list(p) for p in first]
        ids, chunk_mask = self._left_padded(distinct)
        positions = (chunk_mask.cumsum(1) - 1).clamp(min=0)
        self.mask = chunk_mask[:, :0]  # one row per distinct prompt until the copy below
        logits = self._forward(ids, chunk_mask, positions)
        self.recurrent = holds_recurrent_state(self.cache)
        if self.recurrent:
            self.history = [list(p) for p in prompts]
            if len(distinct) < len(prompts):  # its cache rows cannot be copied: every row is encoded
                self._encode_histories()
                return
        elif len(distinct) < len(prompts):
            rows = torch.as_tensor(source, dtype=torch.long, device=self.device)
            self.cache.batch_select_indices(rows)
            self.mask, logits, chunk_mask = self.mask[rows], logits[rows], chunk_mask[rows]
        self.logits = logits
        self.next_pos = chunk_mask.sum(1)
        self.pending = [[] for _ in range(len(prompts))]

    def _encode_histories(self) -> None:
        """Recurrent models: a fresh cache from every row's whole history, left-padded, so that padding
        only precedes a row's first id (where the model pads with zeros anyway)."""
        self.cache, self.mask = None, torch.zeros((len(self.history), 0), dtype=torch.long, device=self.device)
        ids, chunk_mask = self._left_padded(self.history)
        self.logits = self._forward(ids, chunk_mask, (chunk_mask.cumsum(1) - 1).clamp(min=0))
        self.next_pos = chunk_mask.sum(1)
        self.pending = [[] for _ in range(self.rows)]

    @torch.no_grad()
    def sample(self, *, stop_ids: Sequence[int], max_new_tokens: int, temperature: float = 1.0,
               generator: torch.Generator | None = None, greedy: bool = False) -> list[Generated]:
        """One action per row, sampled from ``softmax(logits / temperature)`` with ``generator`` (or, ``greedy``,
        its argmax; the log-probs are at ``temperature`` either way). The last sampled id of each row stays
        pending until the next ``extend``."""
        if self.logits is None:
            raise RuntimeError("call extend() before sample()")
        if not greedy and generator is None:
            raise ValueError("sampling needs an explicit torch.Generator (no global RNG)")
        stops = torch.as_tensor(sorted(set(stop_ids)), dtype=torch.long, device=self.device)
        results = [Generated([], [], False) for _ in range(self.rows)]
        active = torch.ones(self.rows, dtype=torch.bool, device=self.device)
        live = list(range(self.rows))  # the rows of ``active``, as a list
        for t in range(max_new_tokens):
            logp = torch.log_softmax(self.logits.float() / temperature, dim=-1)
            tok = logp.argmax(dim=-1) if greedy else torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
            tok_lp = logp.gather(1, tok[:, None]).squeeze(1)
            finished = torch.isin(tok, stops)
            toks, lps, fins = tok.tolist(), tok_lp.tolist(), finished.tolist()  # one copy per step, not per row
            for i in live:
                results[i].ids.append(toks[i])
                results[i].logprobs.append(lps[i])
                results[i].stopped = fins[i]
            live = [i for i in live if not fins[i]]
            still = active & ~finished
            if t == max_new_tokens - 1 or not live:
                break
            # feed the sampled ids of rows still generating; the others get a masked hole
            feed = torch.where(still, tok, torch.full_like(tok, self.pad_id))
            self.logits = self._forward(feed[:, None], still.long()[:, None], self.next_pos[:, None])
            self.next_pos = self.next_pos + still.long()
            active = still
        for i, r in enumerate(results):
            self.pending[i] = [r.ids[-1]]
            if self.recurrent:  # the ids fed while sampling (all but the pending last one)
                self.history[i].extend(r.ids[:-1])
        self.logits = None
        return results

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only these rows (in this order); the others' episodes are over."""
        if list(rows) == list(range(self.rows)):
            return
        idx = torch.as_tensor(list(rows), dtype=torch.long, device=self.device)
        if self.recurrent:
            self.cache = None  # the next extend encodes the kept rows' histories
            self.history = [self.history[i] for i in rows]
        elif self.cache is not None:
            self.cache.batch_select_indices(idx)
        self.mask, self.next_pos = self.mask[idx], self.next_pos[idx]
        self.pending = [self.pending[i] for i in rows]


def generate_actions(model: PreTrainedModel, prompts: Sequence[Sequence[int]], *, stop_ids: Sequence[int], pad_id: int,
                     max_new_tokens: int, temperature: float = 1.0, generator: torch.Generator | None = None,
                     greedy: bool = False) -> list[Generated]:
    """One generated action per prompt (a single-turn session)."""
    if not prompts:
        return []
    session = DecodeSession(model, pad_id, len(prompts))
    session.extend(prompts)
    return session.sample(stop_ids=stop_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                          generator=generator, greedy=greedy)
