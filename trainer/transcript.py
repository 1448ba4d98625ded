"""Token ids of a multi-turn conversation, built incrementally through the chat template.

The policy's own generated ids are kept as they are; only text the *environment* adds (the
first prompt, then each step's new messages) is tokenized, and only that new text: the
template renders the conversation before and after the step, and the ids appended are
those of the difference. This requires a prefix-stable template (appending messages does
not change earlier text), which is checked every step; a template that is not prefix-stable
raises an error naming the problem instead of silently re-tokenizing the transcript.

Per turn the token stream looks like (compact view)::

    <bos> <obs> tools ... | user ... <act> | call get_user user_id $0 <eos> | <obs> ok name $1 <act> | ...
    \\__________ prompt, mask 0 ___________/ \\___ generated, mask 1 ____/ \\____ env, mask 0 ____/
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .policy import Policy

Messages = list[dict[str, Any]]


class TemplateError(ValueError):
    pass


@dataclass
class Transcript:
    """One episode's token stream: ids, which ids the policy generated, their sampling log-probs."""

    ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""  # the rendered conversation so far (ends with the generation prompt)

    def add_context(self, ids: Sequence[int]) -> None:
        self.ids.extend(ids)
        self.action_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def add_action(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.action_mask.extend([1] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def trim_context(self) -> None:
        """Drop context after the last generated id (an episode's final observation carries no loss)."""
        if 1 not in self.action_mask:
            return
        end = len(self.action_mask) - self.action_mask[::-1].index(1)
        del self.ids[end:], self.action_mask[end:], self.logprobs[end:]

    def __len__(self) -> int:
        return len(self.ids)

    def copy(self) -> "Transcript":
        return Transcript(list(self.ids), list(self.action_mask), list(self.logprobs), self.text)


class ChatCodec:
    """Renders conversations with the policy's chat template and tokenizes only what is new."""

    def __init__(self, policy: Policy) -> None:
        self.tokenizer = policy.tokenizer
        self.name = policy.name
        self.eos_id = policy.eos_id
        self.stop_ids = frozenset(policy.stop_ids)
        self.stop_text = self.tokenizer.convert_ids_to_tokens(policy.eos_id)

    def render(self, messages: Messages, tools: list[dict[str, Any]] | None, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def start(self, messages: Messages, tools: list[dict[str, Any]] | None) -> Transcript:
        tr = Transcript()
        tr.text = self.render(messages, tools, True)
        tr.add_context(self.encode(tr.text))
        return tr

    def continue_after_action(self, tr: Transcript, messages: Messages, n_new: int, tools: list[dict[str, Any]] | None,
                              stopped: bool) -> None:
        """Append the ids of the ``n_new`` messages that follow the assistant message ``messages[-n_new - 1]``.

        ``stopped``: whether the generated action ended with the template's end-of-turn token
        (``closes_turn``); if not (the length limit, or another stop id such as a base model's
        ``<|endoftext|>``), that token is added as context so the conversation stays well formed.
        A template that closes an assistant message with no special token (GPT-2 style, ``"{content}\n"``)
        never renders the stop token the policy ends its action with: the ids keep it, then the template's
        own text after the action's content, so they are the rendered conversation plus that one token per action.
        """
        assert messages[-n_new - 1]["role"] == "assistant", "the message before the new ones must be the action"
        with_action = self.render(messages[: len(messages) - n_new], tools, False)
        if not with_action.startswith(tr.text):
            raise TemplateError(f"the chat template of {self.name!r} is not prefix-stable: adding the assistant "
                                "message changed earlier text, so new ids cannot be appended without re-tokenizing")
        full = self.render(messages, tools, True)
        if not full.startswith(with_action):
            raise TemplateError(f"the chat template of {self.name!r} is not prefix-stable: adding tool/user "
                                "messages changed the text of earlier messages")
        rendered_action = with_action[len(tr.text):]
        cut = rendered_action.rfind(self.stop_text)
        if cut >= 0:  # the template closes the turn with the stop token: what follows it is context
            tail = rendered_action[cut + len(self.stop_text):]
        else:  # no end-of-turn token (GPT-2 style): the template's text after the action's content ("\n")
            content = str(messages[-n_new - 1].get("content") or "")
            at = rendered_action.rfind(content) if content else -1
            tail = rendered_action[at + len(content):] if at >= 0 else ""
        delta = (tail if stopped else self.stop_text + tail) + full[len(with_action):]
        tr.add_context(self.encode(delta))
        tr.text = full

    def closes_turn(self, ids: Sequence[int]) -> bool:
        """Whether generated ``ids`` end with the end-of-turn token the template writes after an action."""
        return bool(ids) and ids[-1] == self.eos_id

    def action_text(self, ids: Sequence[int]) -> str:
        """The text the environment receives for generated ``ids`` (stop token and specials removed)."""
        body = [i for i in ids if i not in self.stop_ids]
        return self.tokenizer.decode(body, skip_special_tokens=True).strip()

    def action_ids(self, text: str) -> list[int]:
        """Demonstration ids for an action text: its tokens, then the end-of-action token."""
        return self.encode(text) + [self.eos_id]
