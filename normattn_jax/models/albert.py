"""ALBERT (Lan et al. 2020) in flax.linen with any attention normalisation: the DNAS paper's
pre-training platform::

    e = LN(word + position + token type)      width E (factorised embedding)
    x = e W + b                               E -> H
    x = layer_{g(l)}(x),  l = 0 .. L-1        g(l) = floor(l G / L): G groups of
                                              ``inner_group_num`` post-LN ``BertLayer``s, shared
    pooled = tanh(x_0 W_p + b_p)

as google-research/albert's ``modeling.py``: tanh GELU ("gelu_new"), truncated-normal(0.02)
kernels and embeddings, LayerNorm eps 1e-12. The attention is the project's
``MultiHeadAttention`` with any registered normalisation (``attention="softmax"|"dnas"|"hnas"|
"sinkhorn"|"nap"|"non"`` or the user's); its per-head parameters marked ``per_layer`` are kept
per layer application while all other parameters are shared: with HNAS u per head
(``hybrid_weights [L * inner, heads]``), so the per-layer u of the DNAS paper's Fig. 4 exists.

``AlbertForPretraining`` adds the MLM head (dense E + activation + LN, logits through the tied
word embeddings plus a bias, on the gathered masked positions) and the SOP head (dense 2 on the
pooled output); ``pretraining_loss`` is ALBERT's loss: the weighted mean MLM cross-entropy plus
the mean SOP cross-entropy.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.models.bert import (ACTIVATIONS, BertConfig, BertEmbeddings, BertLayer,
                                      check_attention_module)
from normattn_jax import precision
from normattn_jax.norms import LayerNorm
from normattn_jax.validation import check_int

__all__ = ["AlbertConfig", "AlbertForPretraining", "AlbertModel", "per_layer_params",
           "pretraining_loss"]

Array = jax.Array
INIT = nn.initializers.truncated_normal(0.02)  # TF1's truncated_normal_initializer(0.02)
DTYPES = precision.DTYPES  # model.dtype's values: normattn_jax.precision's policy


@dataclasses.dataclass(frozen=True)
class AlbertConfig(BertConfig):
  """ALBERT's ``albert_config.json`` fields plus the attention normalisation (a name, or an
  ``AttentionSpec`` with its options) and ``MultiHeadAttention``'s own options
  (``attention_module``: its implementation, "auto" by default, and its additions, off by
  default). The shared layers' differential lambda_init follows each application's depth (layer
  application l of ``num_layer_applications``, from 1)."""
  vocab_size: int = 30000
  embedding_size: int = 128
  hidden_act: str = "gelu_new"
  num_hidden_groups: int = 1
  inner_group_num: int = 1
  attention: Union[str, AttentionSpec] = "softmax"
  attention_module: AttentionModuleSpec = AttentionModuleSpec()

  def __post_init__(self):
    super().__post_init__()
    for name in ("embedding_size", "num_hidden_groups", "inner_group_num"):
      check_int(name, getattr(self, name))
    if self.num_hidden_groups > self.num_hidden_layers:
      raise ValueError(f"num_hidden_groups ({self.num_hidden_groups}) must not exceed "
                       f"num_hidden_layers ({self.num_hidden_layers})")
    AttentionSpec.of(self.attention).resolved()  # a registered name, options it accepts
    check_attention_module(self.attention_module, self)

  @property
  def num_layer_applications(self) -> int:
    """The number of layer applications: ``num_hidden_layers * inner_group_num``.

    Returns:
      A positive integer.
    """
    return self.num_hidden_layers * self.inner_group_num

  def group_of_layer(self, layer: int) -> int:
    """The group whose shared layers layer ``layer`` applies: ``floor(layer G / L)``.

    Args:
      layer: the layer index, in [0, num_hidden_layers).

    Returns:
      The group index, in [0, num_hidden_groups).
    """
    return layer * self.num_hidden_groups // self.num_hidden_layers


def per_layer_params(attention: Union[str, AttentionSpec]) -> tuple:
  """The normalisation's per-head parameters that ALBERT keeps per layer application.

  Args:
    attention: a registered normalisation's name or ``AttentionSpec``.

  Returns:
    A tuple of ``HeadParam`` with ``per_layer`` set (e.g. HNAS's ``hybrid_weight``).

  Raises:
    ValueError: if ``attention`` is not registered.
  """
  return tuple(p for p in AttentionSpec.of(attention).normalization.params if p.per_layer)


class AlbertModel(nn.Module):
  """``input_ids [B, N]`` -> ``{"last_hidden_state", "pooler_output", "hidden_states"?}``.

  ``attention_mask`` (1 = token, 0 = padding) masks padded queries and keys (the column
  normalisation of DNAS, HNAS and Sinkhorn must not see padded queries either);
  ``dtype=jnp.bfloat16`` computes in bf16 with float32 parameters and float32 LayerNorm
  statistics."""
  config: AlbertConfig
  dropout_rate: float = 0.0
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32

  def setup(self):
    """Build the submodules: embeddings, projection, shared layer groups, per-layer head
    parameters and pooler."""
    c = self.config
    self.embeddings = BertEmbeddings(c, self.dropout_rate, self.dtype, self.param_dtype,
                                     features=c.embedding_size, embedding_init=INIT)
    self.embedding_projection = nn.Dense(c.hidden_size, dtype=self.dtype, kernel_init=INIT,
                                         param_dtype=self.param_dtype)
    self.groups = [[BertLayer(c, self.dropout_rate, self.dtype, self.param_dtype,
                              normalization=c.attention, kernel_init=INIT,
                              attention_module=c.attention_module,
                              name=f"group_{g}_inner_{i}")
                    for i in range(c.inner_group_num)] for g in range(c.num_hidden_groups)]
    options = AttentionSpec.of(c.attention).resolved()
    self.layer_params = {
        p.name: self.param(p.name + "s", p.init(options),
                           (c.num_layer_applications, c.num_attention_heads), self.param_dtype)
        for p in per_layer_params(c.attention)}
    self.pooler = nn.Dense(c.hidden_size, dtype=self.dtype, kernel_init=INIT,
                           param_dtype=self.param_dtype)

  def __call__(self, input_ids: Array, attention_mask: Optional[Array] = None,
               token_type_ids: Optional[Array] = None, *, deterministic: bool = True,
               output_hidden_states: bool = False, sow_weights: bool = False) -> dict:
    c = self.config
    seq_len = input_ids.shape[-1]
    if seq_len > c.max_position_embeddings:
      raise ValueError(f"input_ids has {seq_len} positions, more than max_position_embeddings "
                       f"({c.max_position_embeddings})")
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    positions = jnp.broadcast_to(jnp.arange(seq_len), input_ids.shape)
    padding_mask = None if attention_mask is None else jnp.asarray(attention_mask).astype(bool)
    x = self.embedding_projection(
        self.embeddings(input_ids, token_type_ids, positions, deterministic))
    hidden = [x]
    for layer in range(c.num_hidden_layers):
      for inner, block in enumerate(self.groups[c.group_of_layer(layer)]):
        application = layer * c.inner_group_num + inner
        own = {name: value[application] for name, value in self.layer_params.items()}
        x = block(x, padding_mask, deterministic, sow_weights, head_params=own,
                  layer_index=application + 1)
      hidden.append(x)
    out = {"last_hidden_state": x, "pooler_output": jnp.tanh(self.pooler(x[..., 0, :]))}
    if output_hidden_states:
      out["hidden_states"] = tuple(hidden)
    return out

  def word_embeddings(self) -> Array:
    """The ``[vocab, E]`` table, for the tied MLM output layer."""
    return self.embeddings.variables["params"]["word_embeddings"]["embedding"]


class AlbertForPretraining(nn.Module):
  """ALBERT with its MLM and SOP heads. ``__call__(batch)`` takes the example arrays
  (``input_ids``, ``input_mask``, ``segment_ids``, ``masked_lm_positions``) and returns float32
  ``mlm_logits [B, P, vocab]``, ``sop_logits [B, 2]`` and, with HNAS, ``hybrid_weights``."""
  config: AlbertConfig
  dropout_rate: float = 0.0
  dtype: Optional[Any] = None

  def setup(self):
    """Build the encoder and the two pre-training heads (MLM transform and bias, SOP)."""
    c = self.config
    self.albert = AlbertModel(c, self.dropout_rate, self.dtype)
    self.mlm_transform = nn.Dense(c.embedding_size, dtype=self.dtype, kernel_init=INIT)
    self.mlm_norm = LayerNorm(epsilon=c.layer_norm_eps)
    self.mlm_bias = self.param("mlm_bias", nn.initializers.zeros, (c.vocab_size,))
    self.sop = nn.Dense(2, kernel_init=INIT)

  def __call__(self, batch: dict, *, deterministic: bool = True) -> dict:
    out = self.albert(batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                      deterministic=deterministic)
    positions = batch["masked_lm_positions"]
    gathered = jnp.take_along_axis(out["last_hidden_state"], positions[..., None], axis=-2)
    h = self.mlm_norm(ACTIVATIONS[self.config.hidden_act](self.mlm_transform(gathered)))
    table = self.albert.word_embeddings()
    mlm_logits = jnp.einsum("bpe,ve->bpv", h.astype(jnp.float32), table.astype(jnp.float32))
    result = {"mlm_logits": mlm_logits + self.mlm_bias,
              "sop_logits": self.sop(out["pooler_output"].astype(jnp.float32))}
    for p in per_layer_params(self.config.attention):  # e.g. HNAS's u, as used
      result[p.name + "s"] = p.constrain(self.albert.layer_params[p.name])
    return result


def pretraining_loss(outputs: dict, batch: dict) -> tuple[Array, dict]:
  """ALBERT's loss: sum_p w_p CE_p / (sum_p w_p + 1e-5) for the MLM plus the mean SOP
  cross-entropy; also the accuracies (weighted over real masked positions).

  Args:
    outputs: ``AlbertForPretraining``'s outputs: ``mlm_logits [B, P, vocab]``,
      ``sop_logits [B, 2]``.
    batch: the example arrays: ``masked_lm_ids [B, P]`` (int), ``masked_lm_weights [B, P]``
      (1 = real masked position, 0 = padding) and ``sentence_order_label [B]`` (int, 0 or 1).

  Returns:
    ``(loss, metrics)``: the scalar loss and a dict of scalars ``loss``, ``mlm_loss``,
    ``sop_loss``, ``mlm_accuracy``, ``sop_accuracy`` and ``mlm_weight`` (the sum of the weights).
  """
  mlm_logp = jax.nn.log_softmax(outputs["mlm_logits"])
  ids = batch["masked_lm_ids"]
  w = batch["masked_lm_weights"].astype(jnp.float32)
  mlm_nll = -jnp.take_along_axis(mlm_logp, ids[..., None], axis=-1)[..., 0]
  mlm_loss = jnp.sum(w * mlm_nll) / (jnp.sum(w) + 1e-5)
  sop_logp = jax.nn.log_softmax(outputs["sop_logits"])
  labels = batch["sentence_order_label"]
  sop_loss = -jnp.mean(jnp.take_along_axis(sop_logp, labels[:, None], axis=-1))
  mlm_correct = (jnp.argmax(mlm_logp, -1) == ids).astype(jnp.float32)
  metrics = {
      "loss": mlm_loss + sop_loss, "mlm_loss": mlm_loss, "sop_loss": sop_loss,
      "mlm_accuracy": jnp.sum(w * mlm_correct) / jnp.maximum(jnp.sum(w), 1.0),
      "sop_accuracy": jnp.mean((jnp.argmax(sop_logp, -1) == labels).astype(jnp.float32)),
      "mlm_weight": jnp.sum(w),
  }
  return mlm_loss + sop_loss, metrics
