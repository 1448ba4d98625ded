"""Shared fixtures: the built-in suite, a small extra domain written as data, and helpers
to snapshot an episode's world so tests can prove a rejected call changed nothing."""

from __future__ import annotations

import copy
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import rods_gym
from rods_gym import SamplerConfig, Suite, TaskSampler, TaskSpec, default_suite, write_jsonl

BENCHMARKS_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
#: step-record keys that are wall-clock timings: the only ones two identical runs may disagree on
# what differs between two runs of the same steps: timings, and the process's memory
TIMING_METRICS = frozenset({"tokens_per_s", "rollout_tokens_per_s", "update_tokens_per_s", "time_gen", "time_env",
                            "time_update", "time_step", "mem_rss_mb", "mem_gpu_mb", "mem_gpu_peak_mb"})

# A small lending-library domain, declared purely as data. Tests write it (or broken copies
# of it) into a temporary directory: adding a domain must need no code change.
LIBRARY_DOMAIN: dict[str, Any] = {
    "name": "library",
    "description": "A lending library: members and the books they borrow.",
    "types": {
        "patron_id": {"schema": {"type": "string", "pattern": "^PTN-[0-9]{4,}$"}, "role": "id"},
        "loan_id": {"schema": {"type": "string", "pattern": "^LON-[0-9]{4,}$"}, "role": "id"},
        "loan_status": {"schema": {"type": "string", "enum": ["out", "returned", "lost"]}, "role": "category"},
    },
    "entities": {
        "member": {
            "role": "person", "count": 10, "id": "patron_id", "id_prefix": "PTN",
            "fields": {
                "name": {"type": "person_name", "faker": "name", "unique": True},
                "email": {"type": "email", "faker": "email", "unique": True},
                "city": {"type": "city", "faker": "city"},
            },
        },
        "loan": {
            "role": "record", "count": 25, "id": "loan_id", "id_prefix": "LON",
            "fields": {
                "patron_id": {"type": "patron_id", "ref": "member"},
                "book_title": {"type": "title", "faker": "catch_phrase"},
                "isbn": {"type": "text", "faker": "isbn13"},
                "due": {"type": "date", "dates": ["2026-02-01", "2026-06-30"]},
                "status": {"type": "loan_status", "choice": ["out", "out", "returned", "lost"]},
                "fee": {"type": "money", "uniform": [0, 40]},
            },
        },
    },
    "tools": [
        {"name": "find_library_member", "kind": "lookup", "entity": "member",
         "description": "Find a library member by email and return the member ID.",
         "phrase": "find the library member with email {email}",
         "parameters": {"type": "object", "properties": {"email": {"description": "the member's email"}},
                        "required": ["email"]},
         "returns": ["patron_id"]},
        {"name": "get_library_member", "kind": "read", "entity": "member",
         "description": "Get a library member's name, email and city.",
         "phrase": "look up library member {patron_id}",
         "parameters": {"type": "object", "properties": {"patron_id": {"description": "the member ID"}},
                        "required": ["patron_id"]},
         "returns": ["name", "email", "city"]},
        {"name": "list_member_loans", "kind": "search", "entity": "loan",
         "description": "List a member's loans, optionally only those with a status.",
         "phrase": "list the loans of library member {patron_id}",
         "parameters": {"type": "object", "properties": {
             "patron_id": {"description": "the member ID"},
             "status": {"description": "only loans with this status"}}, "required": ["patron_id"]},
         "returns": ["loan_id", "book_title", "due"]},
        {"name": "get_loan", "kind": "read", "entity": "loan",
         "description": "Get a loan's book title, due date, status and fee.",
         "phrase": "look up loan {loan_id}",
         "parameters": {"type": "object", "properties": {"loan_id": {"description": "the loan ID"}},
                        "required": ["loan_id"]},
         "returns": ["patron_id", "book_title", "due", "status", "fee"]},
        {"name": "extend_loan", "kind": "update", "entity": "loan",
         "description": "Move a loan's due date.", "phrase": "move the due date of loan {loan_id} to {due}",
         "parameters": {"type": "object", "properties": {
             "loan_id": {"description": "the loan ID"}, "due": {"description": "the new due date"}},
             "required": ["loan_id", "due"]},
         "precondition": {"status": ["out"]},
         "returns": ["due"]},
        {"name": "return_book", "kind": "delete", "entity": "loan",
         "description": "Mark a loan as returned.", "phrase": "mark loan {loan_id} as returned",
         "parameters": {"type": "object", "properties": {"loan_id": {"description": "the loan ID"}},
                        "required": ["loan_id"]},
         "precondition": {"status": ["out"]}, "effect": {"status": "returned"}, "returns": ["status"]},
        {"name": "count_member_loans", "kind": "aggregate", "entity": "loan",
         "description": "Count a member's loans.", "phrase": "count the loans of library member {patron_id}",
         "parameters": {"type": "object", "properties": {"patron_id": {"description": "the member ID"}},
                        "required": ["patron_id"]},
         "op": "count", "output": {"name": "loan_count", "type": "count"}},
        {"name": "open_loan", "kind": "create", "entity": "loan",
         "description": "Lend a book to a member; returns the new loan ID.",
         "phrase": "lend the book {book_title} to library member {patron_id}",
         "parameters": {"type": "object", "properties": {
             "patron_id": {"description": "the member ID"}, "book_title": {"description": "the book's title"}},
             "required": ["patron_id", "book_title"]},
         "defaults": {"status": "out"}, "returns": ["due"]},
    ],
}
LIBRARY_TOOLS = tuple(t["name"] for t in LIBRARY_DOMAIN["tools"])


@pytest.fixture(scope="session")
def suite() -> Suite:
    return default_suite()


@pytest.fixture
def library_domain() -> dict[str, Any]:
    """A fresh deep copy of the library domain, safe to break."""
    return copy.deepcopy(LIBRARY_DOMAIN)


@pytest.fixture
def write_domain(tmp_path: Path) -> Callable[..., Path]:
    """``write_domain(raw, name="library.json", subdir="extra")`` -> path of the written file."""

    def write(raw: Any, name: str = "library.json", subdir: str = "extra") -> Path:
        d = tmp_path / subdir
        d.mkdir(parents=True, exist_ok=True)
        path = d / name
        path.write_text(raw if isinstance(raw, str) else json.dumps(raw, indent=1))
        return path

    return write


@pytest.fixture(scope="session")
def library_suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    """The built-in suite plus the library domain loaded from a temporary directory."""
    d = tmp_path_factory.mktemp("library")
    (d / "library.json").write_text(json.dumps(LIBRARY_DOMAIN))
    return Suite.load(extra_dirs=[d])


#: sampler configs covering every knob; the task pool below draws from each
POOL_CONFIGS: dict[str, tuple[SamplerConfig, int]] = {
    "easy": (rods_gym.DIFFICULTIES["easy"], 400),
    "medium": (rods_gym.DIFFICULTIES["medium"], 500),
    "hard": (rods_gym.DIFFICULTIES["hard"], 300),
    "all_knobs": (SamplerConfig(depth=(1, 4), extra_calls=(0, 2), user_turns=(2, 3), missing_param=1.0,
                                missing_tool=1.0, distractors=(2, 4), cross_domain=1.0, answer=1.0), 300),
}


@pytest.fixture(scope="session")
def task_pool(suite: Suite) -> dict[str, list[TaskSpec]]:
    """1500 sampled tasks across difficulties and knobs (sampled once per test session)."""
    return {name: TaskSampler(suite, cfg, seed=100 + i).sample_many(n)
            for i, (name, (cfg, n)) in enumerate(POOL_CONFIGS.items())}


@pytest.fixture(scope="session")
def easy_tasks(suite: Suite) -> list[TaskSpec]:
    return TaskSampler(suite, rods_gym.DIFFICULTIES["easy"], seed=11).sample_many(40)


def world_snapshot(state: Any) -> dict[str, Any]:
    """Everything an episode can change: the overlay of written records and the id counters.

    Records are deep-copied, so a later in-place mutation of a stored record would show up."""
    return {"changed": state.changed, "overlay": copy.deepcopy(state._overlay), "created": dict(state._created)}


def entity_records(state: Any, entity: str) -> list[dict[str, Any]]:
    """A deep copy of every current record of an entity (base + overlay)."""
    return copy.deepcopy(list(state.records(entity)))


def run_oracle(env: Any, limit: int = 200) -> tuple[float, dict[str, Any], bool, bool]:
    """Step the oracle to the end; return (sum of rewards, last info, terminated, truncated)."""
    base = env.unwrapped
    total, info, term, trunc = 0.0, {}, False, False
    for _ in range(limit):
        _, r, term, trunc, info = env.step(base.oracle_action())
        total += float(r)
        if term or trunc:
            break
    return total, info, term, trunc


@pytest.fixture(autouse=True)
def fresh_accelerator_state() -> Iterator[None]:
    """Each test picks its own device. accelerate keeps one device choice per process, and tests mix
    ``Accelerator(cpu=True)`` (exact CPU arithmetic) with the pipeline's ``make_accelerator()``, which
    takes a GPU where there is one: on a GPU machine the second refused to start in the same process
    (seen on an H200). Reset before and after each test, as accelerate's own AccelerateTestCase does.
    On a GPU the pipeline also turns on torch's deterministic algorithms (``deterministic: true``): the
    switch is put back after the test, so no later test runs under a setting it did not ask for."""
    try:
        import torch
        from accelerate.state import AcceleratorState
    except ImportError:  # the suite without the train extra
        yield
        return
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def cpu_only_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that must run on the CPU (gloo) on any machine: no GPU visible.
    On a one-GPU machine ``accelerate launch --multi_gpu --num_processes 2`` otherwise gives rank 1 a GPU
    that does not exist."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", **extra}


@pytest.fixture(scope="module")
def one_torch_thread() -> Any:
    """One torch thread for a test module: tiny models only pay thread-pool overhead for more
    (measured several times slower on the shared 2-core machine). The setting is restored."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@contextmanager
def benchmarks_on_path() -> Iterator[None]:
    """``benchmarks/`` on ``sys.path`` (its scripts import each other by module name); restored after."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(BENCHMARKS_DIR))
    try:
        yield
    finally:
        mp.undo()


@contextmanager
def benchmarks_package() -> Iterator[None]:
    """The repository root on ``sys.path``, so that ``import benchmarks.X`` finds the benchmarks package (pytest puts
    ``tests/`` there, not the root); restored after."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(BENCHMARKS_DIR.parent))
    try:
        yield
    finally:
        mp.undo()


def easy_seed_tasks() -> list[TaskSpec]:
    """Twelve easy sampler tasks: the seed set of the tiny training-loop tests."""
    return TaskSampler(default_suite(), rods_gym.DIFFICULTIES["easy"], seed=5).sample_many(12)


@pytest.fixture(scope="module")
def task_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``easy_seed_tasks()`` as a JSONL task file (``data.train_split``)."""
    path = tmp_path_factory.mktemp("tasks") / "seeds.jsonl"
    write_jsonl(easy_seed_tasks(), path)
    return path


def warm_tiny_policy(out_dir: Path, sft_steps: int) -> Path:
    """A small compact-view tiny Llama (64 wide, 2 layers) after ``sft_steps`` SFT steps on
    ``easy_seed_tasks()``; saved to ``out_dir``. Short warm starts leave GRPO groups with spread."""
    from rods_gym.trainer.config import SFTConfig, load_config
    from rods_gym.trainer.policy import build_tiny_policy, save_policy
    from rods_gym.trainer.sft import make_demonstrations, train_sft

    cfg = load_config(None, ["policy.hidden_size=64", "policy.intermediate_size=128", "policy.num_layers=2",
                             "policy.num_heads=2"])
    policy = build_tiny_policy(cfg.policy, "compact")
    demos = make_demonstrations(policy, easy_seed_tasks(), "rods/ToolChain-Compact-v0")
    train_sft(policy, demos, SFTConfig(steps=sft_steps, batch_size=6, lr=5e-3, warmup_steps=3), seed=0)
    return save_policy(policy, out_dir)


class SFTCrash(Exception):
    """What ``crash_warm_start_after`` raises: a warm start that dies part-way."""


def crash_warm_start_after(monkeypatch: pytest.MonkeyPatch, step: int) -> Callable[[], None]:
    """Make the pipeline's warm start raise ``SFTCrash`` in its step ``step + 1`` (0-based ``step``, after that
    step's loss is logged). Returns the function that restores the real one (for the resume)."""
    from rods_gym.trainer import pipeline

    real = pipeline.train_sft

    def crashing(*args: Any, on_step: Callable[[int, float], None], **kwargs: Any) -> Any:
        def hook(at: int, loss: float) -> None:
            on_step(at, loss)
            if at == step:
                raise SFTCrash
        return real(*args, on_step=hook, **kwargs)

    monkeypatch.setattr(pipeline, "train_sft", crashing)
    return lambda: monkeypatch.setattr(pipeline, "train_sft", real)


def build_tiny_lfm2_policy(cfg: Any, mode: str, slot_ids: str = "ordered") -> Any:
    """The embedded tokenizer with a seeded LFM2 of ``cfg``'s sizes (its even layers short convolutions, odd layers
    attention): a model whose cache holds a recurrent state, as a hub LFM2 or Mamba-style model brings, built from a
    config (nothing downloaded) to test the decoder's path for such models."""
    import torch
    from transformers import AutoModelForCausalLM, Lfm2Config

    from rods_gym.trainer.policy import build_tiny_policy, wrap

    tokenizer = build_tiny_policy(cfg, mode, slot_ids=slot_ids).tokenizer
    config = Lfm2Config(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                        num_key_value_heads=cfg.num_heads, max_position_embeddings=cfg.max_positions,
                        tie_word_embeddings=True, full_attn_idxs=list(range(1, cfg.num_layers, 2)),
                        block_auto_adjust_ff_dim=False, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        model = AutoModelForCausalLM.from_config(config)
    return wrap(model, tokenizer, f"tiny-lfm2-{mode}")
