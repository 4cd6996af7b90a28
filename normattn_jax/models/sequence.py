"""``SequenceModel``: the NAP paper's model for the synthetic tasks.

Token embedding, optional learned positional embedding, ``num_layers`` blocks of one
architecture, and one of the paper's three output heads. No embedding LayerNorm, no CLS token;
truncated-normal(0.02) kernels and zero biases, as the paper's code.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.attention.module_spec import AttentionModuleSpec
from normattn_jax.blocks import TransformerBlock, check_layer_fields
from normattn_jax.dropout import Dropout
from normattn_jax.validation import check_int

__all__ = ["FIRST_TOKEN_OUTPUTS", "OUTPUTS", "SequenceModel"]

Array = jax.Array

#: What ``SequenceModel`` predicts from (its ``output`` field).
OUTPUTS = ("tokens", "first", "classes", "token_classes")
FIRST_TOKEN_OUTPUTS = ("first", "classes")  # the heads that read token 0 alone
MASKED_LOGIT = -1e9  # logit of a padding position: far below any real one, finite in bf16


class SequenceModel(nn.Module):
  """Tokens ``[batch, N]`` (int) -> logits.

  Output heads (``output``):
    - "tokens":  one logit per token, ``[batch, N]`` (softmax over the sequence picks a position);
    - "first":   the first token projected to ``max_len`` logits, sliced to ``[batch, N]``;
    - "classes": the first token projected to ``num_classes`` logits, ``[batch, num_classes]``;
    - "token_classes": every token projected to ``num_classes`` logits, ``[batch, N, num_classes]``.

  Padding positions (``mask`` False) get the logit -1e9 in the two position heads.
  For the heads that read token 0 alone (``FIRST_TOKEN_OUTPUTS``) the last block computes token
  0 alone (``TransformerBlock``'s ``first_only``: its query token 0, its keys and values every
  token), the same logits for 0.57-0.59x the FLOPs of a training step (BENCHMARKS.md);
  ``all_tokens`` (or ``sow_weights``, whose weights analyses read over every query) computes
  every token of it, for analyses that capture the last block's intermediates.
  ``attention_module`` carries ``MultiHeadAttention``'s own options into every block (its
  additions for attention archs only; block l, counted from 1, is differential attention's
  layer l); ``ffn_implementation`` how every block computes its feed-forward sub-block
  (``normattn_jax.feedforward``).
  """
  vocab_size: int
  max_len: int
  d_model: int = 128
  num_layers: int = 2
  num_heads: int = 4
  arch: str = "mte"
  normalization: Union[str, AttentionSpec, None] = None
  normalize: Optional[bool] = None
  attention_gelu: Optional[bool] = None
  output: str = "tokens"
  num_classes: Optional[int] = None
  positional: bool = True
  ffn_features: Optional[int] = None
  dropout_rate: float = 0.0
  layer_norm_epsilon: float = 1e-3
  init_std: float = 0.02
  attention_module: AttentionModuleSpec = AttentionModuleSpec()
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  ffn_implementation: str = "xla"
  all_tokens: bool = False

  def __post_init__(self):
    for name in ("vocab_size", "max_len", "d_model"):
      check_int(name, getattr(self, name))
    check_int("num_layers", self.num_layers, low=0)
    check_layer_fields(self, self.d_model)
    if self.output not in OUTPUTS:
      raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
    if self.num_classes is not None:
      check_int("num_classes", self.num_classes)
    if not self.init_std > 0:
      raise ValueError(f"init_std must be > 0, got {self.init_std!r}")
    super().__post_init__()

  @nn.compact
  def __call__(self, tokens: Array, mask: Optional[Array] = None,
               deterministic: bool = True, sow_weights: bool = False) -> Array:
    seq_len = tokens.shape[-1]
    if seq_len > self.max_len:
      raise ValueError(f"sequence length {seq_len} exceeds max_len ({self.max_len})")
    init = nn.initializers.truncated_normal(self.init_std)
    x = nn.Embed(self.vocab_size, self.d_model, embedding_init=init, dtype=self.dtype,
                 param_dtype=self.param_dtype, name="token_embedding")(tokens)
    if self.positional:
      positions = self.param("position_embedding", init, (self.max_len, self.d_model),
                             self.param_dtype)
      x = x + positions[:seq_len].astype(x.dtype)
    x = Dropout(self.dropout_rate)(x, deterministic=deterministic)
    first_only = self.output in FIRST_TOKEN_OUTPUTS and not (self.all_tokens or sow_weights)
    for layer in range(self.num_layers):
      x = TransformerBlock(
          num_heads=self.num_heads, arch=self.arch, normalization=self.normalization,
          normalize=self.normalize, attention_gelu=self.attention_gelu,
          ffn_features=self.ffn_features, dropout_rate=self.dropout_rate,
          layer_norm_epsilon=self.layer_norm_epsilon, kernel_init=init,
          attention_module=self.attention_module, dtype=self.dtype,
          param_dtype=self.param_dtype, layer_index=layer + 1,
          ffn_implementation=self.ffn_implementation,
          name=f"block_{layer}")(x, mask, deterministic, sow_weights,
                                 first_only=first_only and layer == self.num_layers - 1)
    return self._head(x, mask, init, seq_len)

  def _head(self, x: Array, mask: Optional[Array], init, seq_len: int) -> Array:
    dense = lambda features: nn.Dense(features, kernel_init=init, dtype=self.dtype,
                                      param_dtype=self.param_dtype, name="head")
    if self.output == "classes":
      return dense(self.num_classes or self.vocab_size)(x[..., 0, :])
    if self.output == "token_classes":
      return dense(self.num_classes or self.vocab_size)(x)
    if self.output == "tokens":
      logits = dense(1)(x)[..., 0]
    else:
      logits = dense(self.max_len)(x[..., 0, :])[..., :seq_len]
    if mask is not None:
      logits = jnp.where(mask, logits, jnp.asarray(MASKED_LOGIT, logits.dtype))
    return logits
