"""TRL's ``environment_factory`` on any ``rods/*`` chat env, with the same curriculum object as the ``rollout_func``
adapter (:class:`~rods_gym.integrations.trl.TRLCurriculum`) choosing the tasks from the group rewards TRL
computed. Install with ``pip install "rods-gym[trl]"`` (trl 1.16, transformers >= 5.2).

    curriculum = TRLToolCurriculum(make_source("rods", seeds, group_size=8), "rods/ToolChain-Chat-v0",
                                   tasks_per_batch=4, group_size=8)
    args = GRPOConfig(num_generations=8, per_device_train_batch_size=32, shuffle_dataset=False, max_steps=100,
                      max_completion_length=1024, ...)
    trainer = curriculum.build_trainer(model, args, processing_class=tokenizer)   # or GRPOTrainer(...) + bind()
    trainer.train()

How it plugs in (read from trl 1.16's ``GRPOTrainer``):

- **The class is the tool list.** TRL builds one instance per rollout from ``environment_factory`` and reads the
  tools from the *class* when the trainer is built: its public methods (name, signature, Google docstring, turned
  into JSON Schemas by transformers' ``get_json_schema``), less ``reset`` and ``get_reward``. Each method here is
  one tool of the env with its JSON Schema as a Python signature: types (``enum`` as ``Literal``), required vs
  optional; what a signature cannot hold (``pattern``, ``minimum``, ``maxLength``, an object's keys, ...) is written
  into the argument's description. A call becomes the chat view's action, so the env validates it against the real
  schema. ``message_user`` (the text to the user) is a tool too: TRL ends a rollout at the first reply without a
  tool call, while a rods task may go on after a reply (the scripted user's answer, its next request).
- **Per-task tools: the class offers a fixed union.** A rods task offers its own few tools and RODS synthesizes
  tasks over other tools mid-run, but TRL fixes the tool list when the trainer is built. So the class offers
  ``tools`` (default: every tool the env can offer, the suite's 105 or BFCL's 128 functions), every prompt lists
  them all (long prompts: about 12k tokens of schemas for the whole suite with a Qwen template), and ``reset``
  names the task's own tools in the first user message (``name_task_tools``). A tool outside the task answers with
  the env's error, as an unknown tool does. With a restricted ``tools`` list, a task over another tool stops
  training with an error naming it; restrict only with a curriculum whose tasks stay inside it (fixed seeds, or a
  source whose resampler excludes the other tools). The augmentation arms rename tools per episode, so they do
  not fit a fixed class (use the ``rollout_func`` adapter). TRL's ``dict`` form (one class per environment name, chosen by
  an ``environment`` column) cannot serve a curriculum: the column is read when the row is fetched, before the
  curriculum has observed the previous group.
- **Rows are curriculum slots**, as in the ``rollout_func`` adapter: ``dataset(args)`` holds one row per prompt
  slot; ``reset(**row)`` asks the curriculum for the slot's task when TRL starts the rollout (after every earlier
  group was observed), resets the env on it and returns the task's first request (appended to the row's user
  message). ``get_reward()`` is the episode's return (its progress in [0, 1]).
- **Feedback**: the ``rollout_func`` adapter's :class:`~rods_gym.integrations.trl.RODSCallback` reads the rewards TRL
  logged (the ``get_reward`` column and any other reward function, weighted) after every optimizer step and the
  curriculum observes each complete group; :func:`rods_episode_success` logs each episode's success beside them.
  The callback needs the trainer: ``build_trainer`` binds it, or call ``bind(trainer)``.

Use this adapter when the model should call tools the way TRL's tool loop renders them (the model's own chat
template and tool-call parser, parallel calls, async tools). Use the ``rollout_func`` adapter
(:mod:`rods_gym.integrations.trl`) for the compact view, for a prompt with only the task's tools, or to keep the
rollout's token ids under your control.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from datasets import Dataset

from rods_gym.curricula import TaskSource
from rods_gym.task import TaskSpec

from .tool_episode import USER_TOOL, ToolEpisode, suite_tools, task_tool_names
from .trl import SLOT_KEY, RODSCallback, TRLCurriculum, generations_needed

SYSTEM_PROMPT = ("You are an assistant that completes the user's requests with the tools provided, one tool call at "
                 "a time. To ask the user for missing information, or to reply when a request is done (or cannot be "
                 "done with your tools), call message_user; the user's answer or next request comes back.")
JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                              "object": dict, "null": type(None)}
NOTED = ("pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
         "minItems", "maxItems", "default")
CLASS_NAME = "RodsToolEnv"  # TRL logs the get_reward column under the class's name


def python_type(schema: Mapping[str, Any]) -> Any:
    """A JSON Schema (one parameter's) as the type hint ``get_json_schema`` turns back into it."""
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        return Union[tuple(python_type({**schema, "type": k}) for k in kind)]
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return list[python_type(schema["items"])]
    return JSON_TYPES.get(kind, Any) if kind is not None else Any


def argument_note(schema: Mapping[str, Any]) -> str:
    """The parameter's description plus what a type hint cannot say (one line: the docstring parser's form)."""
    notes = [f"{key} {schema[key]!r}" if isinstance(schema[key], str) else f"{key} {schema[key]}"
             for key in NOTED if key in schema]
    if isinstance(schema.get("properties"), Mapping):
        notes.append("keys " + ", ".join(schema["properties"]))
    items = schema.get("items")
    if isinstance(items, Mapping) and any(k in items for k in NOTED):
        notes.append("each item: " + argument_note({k: v for k, v in items.items() if k != "description"}))
    text = " ".join(str(schema.get("description", "")).split())
    return (text + (f" ({'; '.join(notes)})" if notes else "")).strip()


def tool_method(schema: Mapping[str, Any]) -> Callable[..., str]:
    """One tool of a chat-template schema as a method ``name(self, **arguments) -> str`` whose signature and
    docstring carry the schema; calling it steps the instance's episode with the call."""
    f = schema["function"]
    name, params = str(f["name"]), f["parameters"]
    properties: Mapping[str, Any] = params.get("properties", {})
    required = set(params.get("required", []))
    bad = [p for p in properties if not p.isidentifier() or keyword.iskeyword(p)]
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in ("reset", "get_reward"):
        raise ValueError(f"tool {name!r} cannot be a method of the environment class (TRL's tools are its methods)")
    if bad:
        raise ValueError(f"tool {name!r}: parameter(s) {bad} are not Python identifiers; a method cannot take them")

    def method(self: "ToolEnvironment", **arguments: Any) -> str:
        return self._call(name, arguments)

    ordered = [p for p in properties if p in required] + [p for p in properties if p not in required]
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for p in ordered:
        annotations[p] = python_type(properties[p])
        parameters.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=annotations[p],
                                            default=inspect.Parameter.empty if p in required else None))
    annotations["return"] = str
    description = " ".join(str(f.get("description", "")).split()) or name
    args_doc = "".join(f"\n    {p}: {argument_note(properties[p]) or p}" for p in ordered)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = description + (f"\n\nArgs:{args_doc}" if ordered else "") + \
        "\n\nReturns:\n    The tool's result (or the env's error message) as text."
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


class ToolEnvironment:
    """The base of the class given to TRL: one rollout's episode. Its public methods are the tools (added by
    :func:`environment_class`); everything else here is ``reset``, ``get_reward`` or private."""

    def __init__(self, curriculum: "TRLToolCurriculum") -> None:
        self._curriculum = curriculum
        self._episode = ToolEpisode(curriculum.env_id, curriculum.env_kwargs)
        self._task: TaskSpec | None = None

    def reset(self, **row: Any) -> str:
        """Start the episode of the row's task (its curriculum slot); returns the task's first request."""
        task, _ = self._curriculum.curriculum.task_of(row.get("prompt") or [])
        return self._start(task)

    def _start(self, task: TaskSpec) -> str:
        cur = self._curriculum
        self._task = task
        messages = self._episode.start(task=task, options=cur.schedule.env_options(task))
        own = task_tool_names(self._episode.tools)
        missing = sorted(set(own) - set(cur.tool_names))
        if missing:
            raise ValueError(f"task {task.id!r} uses tool(s) {missing} outside this environment class's tools; build "
                             "TRLToolCurriculum with tools=None (every tool of the env) or a list that covers them")
        first = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        if cur.name_task_tools and len(own) < len(cur.tool_names):
            first += "\n\n(Tools for this request: " + ", ".join(own) + ".)"
        return first

    def get_reward(self) -> float:
        """The episode's return: its progress in [0, 1] with the default reward."""
        return float(self._episode.ret)

    def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        return self._episode.call(name, dict(arguments)).text


def environment_class(tools: Sequence[Mapping[str, Any]], name: str = CLASS_NAME) -> type[ToolEnvironment]:
    """A :class:`ToolEnvironment` subclass with one method per tool schema (``message_user`` included)."""
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"tool names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    methods = {n: tool_method(t) for n, t in zip(names, tools)}
    return type(name, (ToolEnvironment,), {**methods, "__doc__": f"rods tools as methods: {', '.join(names)}"})


def tool_list(env: ToolEnvironment) -> list[Callable[..., str]]:
    """The instance's tools as TRL lists them when it renders a prompt (its public methods in name order)."""
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def rods_episode_success(completions: list[Any], environments: Sequence[Any] | None = None,
                         log_extra: Callable[[str, list], None] | None = None, **_: Any) -> list[None]:
    """A reward function that adds nothing (``None``: TRL skips it) and logs each episode's success and task id
    beside TRL's rewards, where the curriculum's callback reads the successes."""
    if environments is not None and log_extra is not None:
        log_extra("rods_success", [bool(e._episode.success) for e in environments])
        log_extra("rods_task_id", [e._task.id if e._task is not None else "" for e in environments])
    return [None] * len(completions)


class TRLToolCurriculum:
    """A task source served to TRL's GRPOTrainer through ``environment_factory``.

    Args:
        source: the curriculum (``rods_gym.curricula.make_source("rods", seeds, group_size=G, env_id=...)`` or any
            TaskSource).
        env_id: a chat view (``rods/ToolChain-Chat-v0``, ``rods/BFCL-MultiTurn-v0``, ...).
        tasks_per_batch: distinct tasks per generation batch = ``generation_batch_size // num_generations``.
        group_size: G = TRL's ``num_generations``.
        tools: tool names the environment class offers (``None``: every tool of the env; see the module doc).
        name_task_tools: name the task's own tools in its first request when the class offers more.
        system_prompt: the rows' system message (how to use ``message_user``).
        env_kwargs: keyword arguments of ``gym.make``.
    """

    def __init__(self, source: TaskSource, env_id: str = "rods/ToolChain-Chat-v0", *, tasks_per_batch: int,
                 group_size: int, tools: Sequence[str] | None = None, name_task_tools: bool = True,
                 system_prompt: str = SYSTEM_PROMPT, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.curriculum = TRLCurriculum(source, env_id, tasks_per_batch=tasks_per_batch, group_size=group_size,
                                        env_kwargs=env_kwargs)
        self.schedule = self.curriculum.schedule
        self.env_id, self.env_kwargs = self.curriculum.env_id, self.curriculum.env_kwargs
        every = suite_tools(self.env_id, self.env_kwargs)
        if tools is not None:
            known = {t["function"]["name"] for t in every}
            unknown = sorted(set(tools) - known)
            if unknown:
                raise ValueError(f"tools {unknown} are not tools of {self.env_id}")
            every = [t for t in every if t["function"]["name"] in set(tools) or t["function"]["name"] == USER_TOOL]
        self.tool_names = [t["function"]["name"] for t in every]
        self.environment_class = environment_class(every)
        self.name_task_tools = bool(name_task_tools)
        self.system_prompt = system_prompt
        self.reward_funcs: list[Callable[..., list]] = [rods_episode_success]

    def environment_factory(self) -> ToolEnvironment:
        """TRL's ``environment_factory``: a fresh environment instance (TRL makes one per concurrent rollout)."""
        return self.environment_class(self)

    def dataset(self, args: Any) -> Dataset:
        """The slot rows for a run with these ``GRPOConfig`` ``args`` (its ``max_steps`` must be set)."""
        self.curriculum.check_args(args)
        n = generations_needed(args.max_steps, args.gradient_accumulation_steps, args.steps_per_generation,
                               args.num_iterations) * self.schedule.tasks_per_batch
        system = {"role": "system", "content": self.system_prompt, SLOT_KEY: None}
        return Dataset.from_list([{"prompt": [system, {"role": "user", "content": "", SLOT_KEY: s}]}
                                  for s in range(n)])

    def callback(self) -> "RODSToolCallback":
        return RODSToolCallback(self)

    def bind(self, trainer: Any) -> Any:
        """Let the callback read ``trainer``'s logged rewards (call once the GRPOTrainer is built)."""
        self.curriculum.trainer = trainer
        return trainer

    def build_trainer(self, model: Any, args: Any, *, processing_class: Any = None, reward_funcs: Sequence = (),
                      callbacks: Sequence = (), **kwargs: Any) -> Any:
        """A ``GRPOTrainer`` wired to this curriculum (dataset, environment factory, reward logging, callback),
        bound; ``reward_funcs`` are added to the env's reward (weights in ``args.reward_weights``)."""
        from trl import GRPOTrainer

        trainer = GRPOTrainer(model=model, args=args, processing_class=processing_class,
                              train_dataset=self.dataset(args), reward_funcs=[*self.reward_funcs, *reward_funcs],
                              environment_factory=self.environment_factory,
                              callbacks=[self.callback(), *callbacks], **kwargs)
        return self.bind(trainer)

    def state_dict(self) -> dict[str, Any]:
        return self.curriculum.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.curriculum.load_state_dict(state)


class RODSToolCallback(RODSCallback):
    """:class:`~rods_gym.integrations.trl.RODSCallback` for the ``environment_factory`` path (same feedback, same
    checkpoint state), with the error this path needs when the trainer was not bound."""

    def __init__(self, tool_curriculum: TRLToolCurriculum) -> None:
        super().__init__(tool_curriculum.curriculum)
        self.tool_curriculum = tool_curriculum

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.curriculum.trainer is None:
            raise RuntimeError("RODSToolCallback: the curriculum does not know its trainer; build it with "
                               "TRLToolCurriculum.build_trainer(...) or call curriculum.bind(trainer)")
        super().on_step_end(args, state, control, **kwargs)



# -- the embedded model on a CPU -----------------------------------------------------------------------------------
# TRL's tool loop needs a chat template that renders tool calls and a parser for the model's replies. Real models
# bring both (TRL knows Qwen, Llama 3, GLM, ...). The embedded byte-level tokenizer gets a ChatML template that
# lists each tool as one short line (a byte is a token: full schemas would make CPU prompts thousands of tokens)
# and writes a call as Qwen does, <tool_call>{"name": ..., "arguments": ...}</tool_call>, so TRL's Qwen response
# parser reads it.
TOOL_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(start=0) %}"
    "{% if messages and messages[0]['role'] == 'system' %}{% set ns.start = 1 %}{% endif %}"
    "<|im_start|>system\n"
    "{% if ns.start == 1 %}{{ messages[0]['content'] }}{% endif %}"
    "{% if tools %}{{ '\\n' }}# Tools\n"
    "{% for t in tools %}{% set f = t['function'] if 'function' in t else t %}"
    "- {{ f['name'] }}({{ f['parameters']['properties'] | list | join(', ') }})\n"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% for m in messages[ns.start:] %}"
    "{% if m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% if m.tool_calls is defined and m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}<|im_start|>tool\n{{ m['content'] }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tool_calling_tokenizer(corpus: Sequence[str] = (), vocab_size: int = 800) -> Any:
    """A tokenizer for the embedded model with :data:`TOOL_CHAT_TEMPLATE` and TRL's Qwen response parser: the
    byte-level one (a byte is a token), or, given a ``corpus`` (e.g. rendered demonstrations), a byte-level BPE
    trained on it (about a third as many tokens; every text still encodes, from the 256 byte symbols)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_template

    from ..trainer.tokenization import CHAT_BOS, CHAT_PAD, IM_END, IM_START, build_chat_tokenizer

    if not corpus:
        tokenizer = build_chat_tokenizer()
    else:
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        bpe.decoder = decoders.ByteLevel()
        bpe.train_from_iterator(list(corpus), trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=[CHAT_PAD, CHAT_BOS, IM_START, IM_END], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token=CHAT_PAD, bos_token=CHAT_BOS,
                                            eos_token=IM_END, additional_special_tokens=[IM_START])
        tokenizer.padding_side = "left"
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = qwen3_template
    return tokenizer


def demonstration(env: ToolEnvironment, task: TaskSpec) -> list[dict[str, Any]]:
    """The oracle's episode of ``task`` as the conversation TRL's tool loop would produce from a row of
    ``dataset``: the system prompt, the first request as ``reset`` returns it, assistant tool calls and tool
    results, a closing reply (for a warm start by imitation)."""
    from .tool_episode import oracle_call

    messages = [{"role": "system", "content": env._curriculum.system_prompt},
                {"role": "user", "content": env._start(task)}]
    while not env._episode.done:
        name, arguments = oracle_call(env._episode)
        result = env._call(name, arguments)
        messages.append({"role": "assistant", "content": "",
                         "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]})
        messages.append({"role": "tool", "name": name, "content": result})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


def warm_start(model: Any, tokenizer: Any, curriculum: TRLToolCurriculum, tasks: Sequence[TaskSpec], steps: int,
               lr: float = 3e-3) -> list[float]:
    """Imitation of the oracle's conversations of ``tasks`` (:func:`demonstration`), the assistant's tokens only,
    full batch, AdamW: so that the embedded model calls tools at all and GRPO's groups have a reward spread.
    Returns the losses."""
    import torch

    env = curriculum.environment_factory()
    tools = tool_list(env)  # in TRL's order: the prompts must be the ones TRL will render

    def ids_of(messages: list[dict[str, Any]], **kw: Any) -> list[int]:
        return list(tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False, **kw))

    rows = []
    for task in tasks:
        messages = demonstration(env, task)
        ids = ids_of(messages)
        mask = [0.0] * len(ids)
        for i, m in enumerate(messages):
            if m["role"] == "assistant":  # its tokens: from its generation prompt to the end of the message
                start, end = len(ids_of(messages[:i], add_generation_prompt=True)), len(ids_of(messages[:i + 1]))
                mask[start:end] = [1.0] * (end - start)
        rows.append((ids, mask))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention, loss_mask = torch.zeros_like(ids), torch.zeros(len(rows), width)
    for r, (row_ids, row_mask) in enumerate(rows):
        ids[r, :len(row_ids)], attention[r, :len(row_ids)] = torch.tensor(row_ids), 1
        loss_mask[r, :len(row_mask)] = torch.tensor(row_mask)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits[:, :-1].float(), -1)
        loss = -(logp.gather(-1, ids[:, 1:, None])[..., 0] * loss_mask[:, 1:]).sum() / loss_mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
