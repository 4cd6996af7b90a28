"""Starting points of fine-tuning: an encoder module, its pre-trained parameters and the
tokenizer its vocabulary belongs to.

Three sources:

- a workdir of ``normattn-pretrain``: its ``config.json`` rebuilds ``AlbertForPretraining``,
  the newest orbax checkpoint gives its parameters, and the ``albert`` part of them (the encoder
  without the MLM and SOP heads) is the starting point; the run's SentencePiece model tokenises;
- a HuggingFace BERT folder (``config.json``, ``model.safetensors``, ``tokenizer.json``) through
  ``models.bert.from_pretrained``;
- the bundled MiniLM (``models.bert.bundled_minilm_path()``), the same way.

Any of them can have its attention normalisation switched before fine-tuning (``attention``, a
name or an ``AttentionSpec``): the pre-trained projections stay, and the new normalisation's own
per-head parameters (HNAS's u, NAP's gain and bias) start from their initialisers, with HNAS's u
at its option ``hybrid_init`` (0 keeps softmax's weights at the start).
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
from typing import Any, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from normattn_jax._extras import require
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.finetune import features
from normattn_jax.models import bert as bert_lib
from normattn_jax.models.albert import AlbertModel

# An optional package: without it, the error names the extra that installs it.
ml_collections = require("ml_collections", "all")

ENCODER_KINDS = ("pretraining", "huggingface", "minilm")


@dataclasses.dataclass(frozen=True)
class StartingPoint:
  """An encoder (``AlbertModel`` or ``BertModel`` with a pooler), the parameters it starts from
  (possibly without the parameters a switched normalisation adds) and its tokenizer (a
  ``finetune.features.Tokenizer``); ``step``: the pre-training checkpoint's, None for the
  others."""
  module: nn.Module
  params: Any
  tokenizer: Any
  description: str
  max_positions: int
  step: Optional[int] = None


def parameters_sha256(params) -> str:
  """A hash of every parameter's path, dtype, shape and values: a fine-tuning workdir records
  it, so that a resumed run refuses an encoder that changed under it."""
  digest = hashlib.sha256()
  for path, value in sorted(traverse_util.flatten_dict(params, sep="/").items()):
    value = np.ascontiguousarray(value)
    digest.update(f"{path}:{value.dtype}:{value.shape}".encode())
    digest.update(value.tobytes())
  return digest.hexdigest()


def _read_json(path: str, what: str) -> dict:
  """The JSON object at ``path``; a missing, damaged or non-object file is refused naming
  ``what`` (the config field) and the file."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{what}: no {path}")
  with open(path) as f:
    try:
      tree = json.load(f)
    except ValueError as err:
      raise ValueError(f"{what}: {path} is not valid JSON ({err})") from None
  if not isinstance(tree, dict):
    raise ValueError(f"{what}: {path} holds a JSON {type(tree).__name__}, not a config")
  return tree


def pretraining_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a pre-training workdir was run with (its ``config.json``, in today's form).

  Raises:
    FileNotFoundError: if the workdir has no ``config.json``.
    ValueError: naming ``encoder.path`` and the file, if it is damaged or the config of
      another kind of run (a sweep's, a fine-tuning run's).
  """
  from normattn_jax.train.migrate import with_current_names
  from normattn_jax.pretrain.train import base_pretrain_config
  path = os.path.join(workdir, "config.json")
  stored = _read_json(path, f"encoder.path={workdir!r}")
  sections = sorted(set(base_pretrain_config()) - {"kind"})
  # a config.json from before the kinds of run has no "kind": it is the workdir's, pre-training
  kind = stored.get("kind", "pretraining")
  if sorted(set(stored) - {"kind"}) != sections or kind != "pretraining":
    raise ValueError(f"encoder.path={workdir!r} is not a pre-training workdir: its {path} has "
                     f"the sections {sorted(set(stored) - {'kind'})} (kind {kind!r}), a "
                     f"pre-training run's has {sections}; give a workdir of "
                     f"normattn-pretrain")
  config = ml_collections.ConfigDict(with_current_names(stored, "pretraining"))
  config.data.files = tuple(config.data.files)
  return config


def pretraining_vocab_path(workdir: str, config: ml_collections.ConfigDict,
                           summary: dict) -> str:
  """The SentencePiece model a pre-training run trained: the one its ``summary.json`` records
  (``vocab``: path relative to the workdir, sha256), else, for a run from before that record,
  the only one under its data cache: the workdir, or ``data.cache_dir``
  (``compare_pretraining.py`` shares the workdirs' parent)."""
  if "vocab" in summary:
    return _recorded_vocab(workdir, summary["vocab"])
  roots = [workdir]
  if config.data.cache_dir:
    roots += [config.data.cache_dir, os.path.dirname(os.path.normpath(workdir))]
  for root in roots:
    found = sorted(glob.glob(os.path.join(root, "data", "*", "spm.model")))
    if len(found) == 1:
      return found[0]
    if len(found) > 1:
      raise ValueError(f"encoder.path={workdir!r}: several vocabularies under {root}/data "
                       f"({found}); the run's data cache is ambiguous")
  raise FileNotFoundError(f"encoder.path={workdir!r}: no SentencePiece model (data/*/spm.model) "
                          f"under {roots}")


def _recorded_vocab(workdir: str, record: dict) -> str:
  """The vocabulary file a pre-training summary names, if it is still the one it trained."""
  from normattn_jax.pretrain.train import file_sha256
  path = os.path.normpath(os.path.join(workdir, record["path"]))
  if not os.path.isfile(path):
    raise FileNotFoundError(f"encoder.path={workdir!r}: the run's vocabulary {path} (its "
                            f"summary.json's vocab) is gone; restore its data cache")
  digest = file_sha256(path)
  if digest != record["sha256"]:
    raise ValueError(f"encoder.path={workdir!r}: the vocabulary {path} changed since the run "
                     f"trained with it (sha256 {digest[:12]}..., recorded {record['sha256'][:12]}"
                     f"...); restore its data cache or pre-train again")
  return path


def from_pretraining(workdir: str, *, attention: Union[str, AttentionSpec, None] = None,
                     dropout: float = 0.0) -> StartingPoint:
  """The ALBERT encoder of a finished ``normattn-pretrain`` run.

  Args:
    workdir: the pre-training run's workdir (``config.json``, ``summary.json``,
      ``checkpoints/``).
    attention: None (or "") keeps the run's normalisation; a registered name or spec switches
      to it.
    dropout: the encoder's dropout rate during fine-tuning.

  Returns:
    The ``AlbertModel``, the ``albert`` parameters of the newest checkpoint and the run's
    SentencePiece tokenizer.
  """
  from normattn_jax.data.sentencepiece_vocab import Vocab
  from normattn_jax.pretrain import train as pretrain
  from normattn_jax.train.checkpoint import restore_newest_state

  config = pretraining_config(workdir)
  if not os.path.isfile(os.path.join(workdir, "summary.json")):
    raise FileNotFoundError(f"encoder.path={workdir!r}: the pre-training run has not finished "
                            f"(no summary.json); finish it with normattn-pretrain first")
  summary = _read_json(os.path.join(workdir, "summary.json"), "encoder.path")
  vocab_path = pretraining_vocab_path(workdir, config, summary)
  vocab_size = Vocab.load(vocab_path).size
  step, state = restore_newest_state(os.path.join(workdir, "checkpoints"))
  params = state["params"]["albert"]
  albert_config = pretrain.model_config(config, vocab_size)
  trained_with = albert_config.attention
  if attention:
    albert_config = dataclasses.replace(albert_config, attention=AttentionSpec.of(attention))
  # the module's additions as pre-trained; how it computes them fine-tuning's own choice
  albert_config = dataclasses.replace(albert_config, attention_module=dataclasses.replace(
      albert_config.attention_module, implementation="auto"))
  module = AlbertModel(albert_config, dropout_rate=dropout)
  described = f"ALBERT pre-trained with {trained_with} ({workdir}, step {step})"
  if albert_config.attention != trained_with:
    described += f", switched to {albert_config.attention}"
  return StartingPoint(module, params, features.as_tokenizer(vocab_path), described,
                       config.model.max_position_embeddings, step)


def from_huggingface(folder, *, attention: Union[str, AttentionSpec, None] = None,
                     dropout: float = 0.0, description: Optional[str] = None) -> StartingPoint:
  """A HuggingFace BERT folder (``bert.from_pretrained``) with a pooler (a fresh one when the
  checkpoint has none) and, with ``attention``, another normalisation.

  Args:
    folder: holds ``config.json``, ``model.safetensors`` and ``tokenizer.json``.
    attention: None (or "") keeps softmax; a registered name or spec switches to it.
    dropout: the encoder's dropout rate during fine-tuning.

  Returns:
    The ``BertModel``, the checkpoint's parameters and the folder's tokenizer.
  """
  model, params = bert_lib.from_pretrained(folder)
  module = bert_lib.BertModel(model.config, add_pooler=True, dropout_rate=dropout,
                              normalization=attention or "softmax")
  described = description or f"BERT from {folder}"
  if attention and AttentionSpec.of(attention) != AttentionSpec("softmax"):
    described += f", switched to {AttentionSpec.of(attention)}"
  params = jax.tree.map(np.asarray, params)
  return StartingPoint(module, params, features.as_tokenizer(str(folder)), described,
                       model.config.max_position_embeddings)


def load_starting_point(encoder: ml_collections.ConfigDict) -> StartingPoint:
  """The starting point a fine-tuning config's ``encoder`` section names."""
  from normattn_jax.attention.section import attention_spec
  options = dict(attention=attention_spec(encoder.attention, "encoder.attention", keep=True),
                 dropout=encoder.dropout)
  if encoder.kind == "pretraining":
    return from_pretraining(encoder.path, **options)
  if encoder.kind == "huggingface":
    return from_huggingface(encoder.path, **options)
  if encoder.kind == "minilm":
    return from_huggingface(bert_lib.bundled_minilm_path(), description="all-MiniLM-L6-v2",
                            **options)
  raise ValueError(f"config.encoder.kind={encoder.kind!r}: must be one of {ENCODER_KINDS}")


def overlay(initial, pretrained, where: str = "encoder"):
  """``initial`` with every leaf that ``pretrained`` holds replaced by it; shapes must agree and
  every pre-trained leaf must have a place. The others (a switched normalisation's new per-head
  parameters) keep their initial values.

  Args:
    initial: freshly initialised parameters of the encoder.
    pretrained: the starting point's parameters (a subset of ``initial``'s paths).
    where: names the tree in errors.

  Returns:
    The merged tree, shaped as ``initial``.
  """
  flat = traverse_util.flatten_dict(initial)
  given = traverse_util.flatten_dict(pretrained)
  unknown = sorted("/".join(p) for p in given if p not in flat)
  if unknown:
    raise ValueError(f"{where}: pre-trained parameters the model has no place for: {unknown[:8]}")
  for path, value in given.items():
    if tuple(np.shape(value)) != tuple(flat[path].shape):
      raise ValueError(f"{where}: {'/'.join(path)} is {np.shape(value)} in the starting point "
                       f"but {flat[path].shape} in the model")
    flat[path] = jnp.asarray(value, flat[path].dtype)
  return traverse_util.unflatten_dict(flat)


def new_parameter_paths(initial, pretrained) -> list[str]:
  """The encoder parameters that start from their initialisers (not in the starting point)."""
  given = set(traverse_util.flatten_dict(pretrained))
  return sorted("/".join(p) for p in traverse_util.flatten_dict(initial) if p not in given)
