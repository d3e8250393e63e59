"""Which model a plan is for: a name, a JSON config, or a factory of the user's.

``--model`` of ``typedflops plan`` takes

- a name of :data:`typedflops.nn.CONFIGS` (``gpt2``, ``llama-7b``...);
- a JSON file: :class:`~typedflops.nn.TransformerConfig`'s fields (``{"vocab": 50257,
  "context": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12}``, GPT-2 style unless
  it says otherwise), or a Hugging Face ``config.json`` of the GPT-2 family (``n_embd``,
  ``n_layer``, ``n_head``...) or the LLaMA family (``hidden_size``,
  ``num_hidden_layers``...);
- ``package.module:factory``: a callable, called with no arguments, that returns a
  ``TransformerConfig`` or a :class:`~typedflops.nn.TransformerLM`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..nn import CONFIGS, TransformerConfig, TransformerLM

__all__ = ["config_from_json", "resolve_model"]

_WHERE = "--model"


def resolve_model(spec: str) -> tuple[str, TransformerConfig]:
    """The name to show and the config of ``spec`` (see the module's doc).

    >>> resolve_model("gpt2")[1].d_model
    768
    """
    if spec in CONFIGS:
        return spec, CONFIGS[spec]
    if spec.endswith(".json") or Path(spec).is_file():
        path = Path(spec)
        if not path.is_file():
            raise SpecError.at(_WHERE, f"no such file: {spec}")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise SpecError.at(_WHERE, f"{spec} is not a JSON file: {error}") from None
        return path.stem, config_from_json(data, spec)
    if ":" in spec:
        return spec, _from_factory(spec)
    known = ", ".join(CONFIGS)
    raise SpecError.at(
        None,
        f"unknown model {spec!r}",
        hint=f"known: {known}; or a JSON config file, or package.module:factory",
    )


def _from_factory(spec: str) -> TransformerConfig:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute.isidentifier():
        raise SpecError.at(_WHERE, f"{spec!r} is not package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SpecError.at(_WHERE, f"cannot import {module_name!r}: {error}") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise SpecError.at(_WHERE, f"{module_name} has no callable {attribute!r}")
    try:
        inspect.signature(factory).bind()
    except TypeError as error:
        raise SpecError.at(
            _WHERE, f"{spec}() cannot be called with no arguments ({error})"
        ) from None
    except ValueError:  # a callable whose signature Python cannot read: call it
        pass
    try:
        made = factory()
    except Exception as error:  # the user's code: where it raised, in one line
        where = traceback.extract_tb(error.__traceback__)[-1]
        raise SpecError.at(
            _WHERE,
            f"{spec}() raised {type(error).__name__} at {Path(where.filename).name}:"
            f"{where.lineno}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": "),
        ) from None
    if isinstance(made, TransformerConfig):
        return made
    if isinstance(made, TransformerLM):
        return made.config
    raise SpecError.at(
        _WHERE,
        f"{spec}() returned {type(made).__name__}, not a TransformerConfig or a TransformerLM",
        hint="for another model, call typedflops.planning.training_memory(model, ...)",
    )


def config_from_json(data: Any, source: str = "the config") -> TransformerConfig:
    """A config from parsed JSON: ``TransformerConfig``'s fields, or a Hugging Face
    ``config.json`` of the GPT-2 or the LLaMA family.

    >>> config_from_json({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
    ...                   "n_embd": 768, "n_layer": 12, "n_head": 12}).d_ff
    3072
    """
    if not isinstance(data, Mapping):
        raise SpecError.at(_WHERE, f"{source} holds {type(data).__name__}, not a JSON object")
    if "model_type" in data or "n_embd" in data or "hidden_size" in data:
        return _hugging_face(data, source)
    fields = {field.name for field in dataclasses.fields(TransformerConfig)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise SpecError.at(
            _WHERE,
            f"{source}: unknown TransformerConfig fields {', '.join(unknown)}",
            hint=f"fields: {', '.join(sorted(fields))}",
        )
    try:
        return TransformerConfig(**data)
    except TypeError as error:
        raise SpecError.at(_WHERE, f"{source}: {error}") from None


def _get(data: Mapping[str, Any], source: str, *names: str, default: Any = None) -> Any:
    for name in names:
        if name in data and data[name] is not None:
            return data[name]
    if default is not None:
        return default
    raise SpecError.at(_WHERE, f"{source} has no {' or '.join(names)}")


def _size(data: Mapping[str, Any], source: str, *names: str, default: int | None = None) -> int:
    """A size of the config: a whole number, as JSON writes it (never one truncated, nor a
    flag or a string read as one)."""
    value = _get(data, source, *names, default=default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        name = next((name for name in names if data.get(name) is not None), names[0])
        raise SpecError.at(_WHERE, f"{source}: {name}={value!r} is not a whole number")
    return value


def _hugging_face(data: Mapping[str, Any], source: str) -> TransformerConfig:
    kind = str(data.get("model_type", "gpt2" if "n_embd" in data else "llama"))
    if kind == "gpt2":
        d_model = _size(data, source, "n_embd")
        return TransformerConfig.gpt2(
            _size(data, source, "vocab_size"),
            _size(data, source, "n_positions", "n_ctx"),
            d_model,
            _size(data, source, "n_layer"),
            _size(data, source, "n_head"),
            d_ff=_size(data, source, "n_inner", default=4 * d_model),
            dropout=float(_get(data, source, "resid_pdrop", default=0.0) or 0.0),
            tied=bool(data.get("tie_word_embeddings", True)),
        )
    if kind in ("llama", "mistral"):
        heads = _size(data, source, "num_attention_heads")
        groups = _size(data, source, "num_key_value_heads", default=heads)
        if groups != heads:
            raise SpecError.at(
                _WHERE,
                f"{source}: grouped-query attention ({groups} key-value heads for {heads} "
                "heads) is not modelled by typedflops.nn.Attention",
            )
        d_model = _size(data, source, "hidden_size")
        return TransformerConfig.llama(
            _size(data, source, "vocab_size"),
            _size(data, source, "max_position_embeddings"),
            d_model,
            _size(data, source, "num_hidden_layers"),
            heads,
            _size(data, source, "intermediate_size"),
            d_head=_size(data, source, "head_dim", default=d_model // max(heads, 1)),
            tied=bool(data.get("tie_word_embeddings", False)),
        )
    raise SpecError.at(
        _WHERE,
        f"{source}: model_type {kind!r} is not one typedflops plans",
        hint="GPT-2 (gpt2) and LLaMA (llama, mistral) families, or TransformerConfig fields",
    )
