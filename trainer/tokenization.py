"""Tokenizers for the embedded policies, built locally (nothing is downloaded).

- ``compact``: a word-level tokenizer over the compact view's closed vocabulary
  (:func:`rods_gym.renderers.compact.vocabulary`) plus special tokens. Its chat template
  renders a conversation as ``<bos> <obs> observation <act> action <eos> <obs> ... <act>``:
  user (environment) messages become ``<obs> ...`` and the agent's actions ``<act> ... <eos>``.
- ``chat``: a byte-level tokenizer (the 256 byte symbols of GPT-2's byte-level BPE, no
  merges) with a ChatML chat template that renders the system prompt, the tool schemas,
  user/assistant/tool messages and the generation prompt, so the text path of the chat view
  (``apply_chat_template`` with ``tools=``, tool-call parsing) runs end to end.

Both are ``transformers`` fast tokenizers: ``save_pretrained``/``from_pretrained`` round-trip them.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rods_gym.renderers.compact import typed_slot_parts, vocabulary
from rods_gym.suite import Suite

PAD, UNK, BOS, EOS, OBS, ACT = "<pad>", "<unk>", "<bos>", "<eos>", "<obs>", "<act>"
COMPACT_SPECIALS = (PAD, UNK, BOS, EOS, OBS, ACT)

COMPACT_TEMPLATE = (
    "{{ bos_token }} "
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<act> {{ m['content'] }} <eos> "
    "{% else %}<obs> {{ m['content'] }} {% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<act>{% endif %}"
)

IM_START, IM_END, CHAT_PAD, CHAT_BOS = "<|im_start|>", "<|im_end|>", "<|pad|>", "<|bos|>"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(start=0) %}"
    "{% if messages and messages[0]['role'] == 'system' %}{% set ns.start = 1 %}{% endif %}"
    "<|im_start|>system\n"
    "{% if ns.start == 1 %}{{ messages[0]['content'] }}{% endif %}"
    "{% if tools %}{{ '\\n' }}# Tools\n"
    "{% for t in tools %}{% set f = t['function'] if 'function' in t else t %}"
    "- {{ f['name'] }}({{ f['parameters']['properties'] | list | join(', ') }}): {{ f['description'] }}\n"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% for m in messages[ns.start:] %}"
    "{% if m['role'] == 'tool' %}<|im_start|>tool\n{{ m['name'] ~ ': ' if m.get('name') }}{{ m['content'] }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_compact_tokenizer(suite: Suite, slot_ids: str = "ordered") -> PreTrainedTokenizerFast:
    """A tokenizer over the compact vocabulary (one token per vocabulary word); ids 0-5 are the special tokens.

    ``slot_ids="typed"`` (the compact view's typed ids): a typed id is two tokens, its type and its
    rank (``$email.0`` -> ``$email ##.0``), in place of the numbered ids ``$0``..``$63``.
    """
    words = [w for w in vocabulary(suite) if w not in COMPACT_SPECIALS]
    if slot_ids == "typed":
        types, ranks = typed_slot_parts(suite)
        words = [w for w in words if not (w.startswith("$") and w[1:].isdigit())] + types
    units = list(words)
    if slot_ids == "typed":
        units += [f"##{r}" for r in ranks]
    vocab = {w: i for i, w in enumerate(list(COMPACT_SPECIALS) + units)}
    if slot_ids == "typed":
        tok = Tokenizer(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="##",
                                         max_input_chars_per_word=200))
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    else:
        tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS,
                                   additional_special_tokens=[OBS, ACT])
    fast.chat_template = COMPACT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_chat_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level tokenizer (every byte is one token) with a ChatML chat template that lists tools."""
    specials = [CHAT_PAD, CHAT_BOS, IM_START, IM_END]
    vocab = {s: i for i, s in enumerate(specials)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=CHAT_PAD, bos_token=CHAT_BOS, eos_token=IM_END,
                                   additional_special_tokens=[IM_START])
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast
