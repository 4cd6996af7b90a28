"""``MultiHeadAttention``: flax.linen multi-head attention with a choice of normalisation.

With ``normalization="softmax"`` it is a drop-in for ``flax.linen.MultiHeadDotProductAttention``:
same constructor fields, call convention, parameter names and shapes (``query``, ``key``,
``value``, ``out``), and the same output for the same params tree.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import fast as fast_lib
from normattn_jax.attention import weights as weights_lib
from normattn_jax.norms import LayerNorm

Array = jax.Array
default_kernel_init = nn.linear.default_kernel_init


def straight_through_clip(u: Array, low: float = 0.0, high: float = 1.0) -> Array:
  """``clip(u)`` in the forward pass, identity gradient: a parameter kept in [low, high] that is
  never stuck at a bound (the projection of a constrained optimiser, without its extra step)."""
  return u + jax.lax.stop_gradient(jnp.clip(u, low, high) - u)


def compute_weights(logits: Array, normalization: str, mask: Optional[Array], *,
                    hybrid_weight: Optional[Array] = None, nap_gain: Optional[Array] = None,
                    nap_bias: Optional[Array] = None, sinkhorn_iters: int = 3) -> Array:
  """Dispatch ``logits [..., heads, q, k] -> weights`` to the registered weight function.

  Per-head parameters have shape ``[heads]`` and are broadcast over queries and keys.
  """
  per_head = lambda p: p.reshape(p.shape + (1, 1))
  if normalization == "softmax":
    return weights_lib.softmax_weights(logits, mask)
  if normalization == "dnas":
    return weights_lib.dnas_weights(logits, mask)
  if normalization == "hnas":
    return weights_lib.hnas_weights(logits, per_head(hybrid_weight), mask)
  if normalization == "sinkhorn":
    return weights_lib.sinkhorn_weights(logits, sinkhorn_iters, mask)
  if normalization == "nap":
    return weights_lib.nap_weights(logits, per_head(nap_gain), per_head(nap_bias), mask)
  if normalization == "non":
    return weights_lib.non_weights(logits, mask)
  raise ValueError(f"normalization must be one of {weights_lib.NORMALIZATIONS}, got {normalization!r}")


IMPLEMENTATIONS = ("auto", "quadratic", "fast")


def compute_fast(q: Array, k: Array, v: Array, normalization: str, *, query_mask, key_mask,
                 causal: bool, hybrid_weight=None, nap_gain=None, nap_bias=None,
                 sinkhorn_iters: int = 3, block_size: int = fast_lib.DEFAULT_BLOCK) -> Array:
  """The exact fast path of ``fast.py`` on ``[..., h, n, d]`` arrays (no N x N weights)."""
  per_head = lambda p: p.reshape(p.shape + (1, 1))
  masks = dict(query_mask=query_mask, key_mask=key_mask, causal=causal)
  blocked = dict(masks, block_size=block_size)
  if normalization == "softmax":
    return fast_lib.softmax_attention(q, k, v, **blocked)
  if normalization == "dnas":
    return fast_lib.dnas_attention(q, k, v, **blocked)
  if normalization == "hnas":
    return fast_lib.hnas_attention(q, k, v, per_head(hybrid_weight), **blocked)
  if normalization == "sinkhorn":
    return fast_lib.sinkhorn_attention(q, k, v, sinkhorn_iters, **blocked)
  if normalization == "nap":
    return fast_lib.nap_attention(q, k, v, per_head(nap_gain), per_head(nap_bias), **masks)
  return fast_lib.non_attention(q, k, v, **masks)


QUADRATIC_LOGITS_LIMIT = 1 << 28  # 1 GiB of float32 logits


def fast_is_faster(normalization: str, q_len: int, k_len: int, head_dim: int, causal: bool,
                   num_logits: int = 0) -> bool:
  """``implementation="auto"``'s rule, from benchmarks/attention_scaling.py (BENCHMARKS.md):
  linear NAP/NON once the sequence is longer than twice the head width (eight times when causal:
  prefix moments cost memory), where they are several times faster; blockwise DNAS/HNAS/Sinkhorn
  recompute logits and are slower than the quadratic path on a CPU, so only once the N x N
  logits of the call (``num_logits`` in all) would pass 1 GiB. Softmax stays quadratic, exactly
  as flax computes it."""
  if normalization in ("nap", "non"):
    return k_len >= (8 if causal else 2) * head_dim
  if normalization in ("dnas", "hnas", "sinkhorn"):
    return max(num_logits, q_len * k_len) >= QUADRATIC_LOGITS_LIMIT
  return False


def structured_mask(mask, query_mask, key_mask, causal, q_len, k_len):
  """One dense boolean mask from a dense ``mask`` and the structured ones (None if none).

  ``causal`` aligns the sequences at their ends, as the fast paths do (queries continuing a key
  cache): query i attends the keys j <= i + k_len - q_len.
  """
  parts = [] if mask is None else [mask]
  if query_mask is not None:
    parts.append(query_mask[..., None, :, None])
  if key_mask is not None:
    parts.append(key_mask[..., None, None, :])
  if causal:
    parts.append(jnp.tril(jnp.ones((q_len, k_len), bool), k_len - q_len))
  if not parts:
    return None
  out = parts[0]
  for part in parts[1:]:
    out = out & part
  return out


def padding_masks(padding_mask, query_mask, key_mask, length: int):
  """``padding_mask [..., n]`` as both the query and the key mask (and-ed with any given).

  Masking the keys alone is not enough: DNAS, HNAS and Sinkhorn normalise each key's column
  over the queries, so a padded query would change the weights of the real ones."""
  padding_mask = jnp.asarray(padding_mask)
  if padding_mask.dtype != jnp.bool_:
    raise TypeError(f"padding_mask must be boolean (True = real token), got dtype "
                    f"{padding_mask.dtype}")
  if padding_mask.ndim < 1 or padding_mask.shape[-1] != length:
    raise ValueError(f"padding_mask of shape {padding_mask.shape} must end in the sequence "
                     f"length {length}")
  both = lambda m: padding_mask if m is None else jnp.asarray(m) & padding_mask
  return both(query_mask), both(key_mask)


def check_attention_fields(*, normalization: str, hybrid_init: float, sinkhorn_iters: int,
                           dropout_rate: float, implementation: str = "auto") -> None:
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
  if normalization not in weights_lib.NORMALIZATIONS:
    raise ValueError(
        f"normalization must be one of {weights_lib.NORMALIZATIONS}, got {normalization!r}")
  if not 0.0 <= hybrid_init <= 1.0:
    raise ValueError(f"hybrid_init (HNAS's u) must lie in [0, 1], got {hybrid_init!r}")
  if isinstance(sinkhorn_iters, bool) or not isinstance(sinkhorn_iters, (int, np.integer)) \
      or sinkhorn_iters < 1:
    raise ValueError(f"sinkhorn_iters must be an integer >= 1, got {sinkhorn_iters!r}")
  if not 0.0 <= dropout_rate < 1.0:
    raise ValueError(f"dropout_rate must lie in [0, 1), got {dropout_rate!r}")


class MultiHeadAttention(nn.Module):
  """Multi-head attention whose weights come from any normalisation in ``weights.py``.

  Extra fields beyond flax's:
    normalization: "softmax" | "dnas" | "hnas" | "sinkhorn" | "nap" | "non".
    hybrid_init: HNAS's initial u per head (kept in [0, 1] by a straight-through clip).
    sinkhorn_iters: number of Sinkhorn iterations for ``"sinkhorn"``.
    scale_logits: divide the logits by sqrt(head_dim); None means yes except for NAP, whose
      normalisation makes the scale moot (as in the NAP paper's code).
    head_norm / head_norm_epsilon / head_activation: optional LayerNorm and activation on the
      concatenated head outputs before the output projection (the MTE/NAP attention sub-module).
    implementation: "quadratic" forms the weights; "fast" uses the exact paths of ``fast.py``
      (linear-time NAP/NON, O(N)-memory DNAS/HNAS/Sinkhorn), which never form them, so they
      take structured masks (``padding_mask``, ``query_mask``, ``key_mask``, ``causal``), no
      dense ``mask``, no attention dropout and no ``sow_weights``; "auto" (default) takes the
      fast path where it is allowed and ``fast_is_faster`` says it pays. Same params either way.
  NAP adds a scalar ``nap_gain`` (init 1) and ``nap_bias`` (init 0) per head; HNAS adds
  ``hybrid_weight`` per head.
  """
  num_heads: int
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  qkv_features: Optional[int] = None
  out_features: Optional[int] = None
  broadcast_dropout: bool = True
  dropout_rate: float = 0.0
  deterministic: Optional[bool] = None
  precision: Any = None
  kernel_init: Callable = default_kernel_init
  out_kernel_init: Optional[Callable] = None
  bias_init: Callable = nn.initializers.zeros_init()
  out_bias_init: Optional[Callable] = None
  use_bias: bool = True
  normalization: str = "softmax"
  hybrid_init: float = 0.5
  sinkhorn_iters: int = 3
  scale_logits: Optional[bool] = None
  head_norm: bool = False
  head_norm_epsilon: float = 1e-6
  head_activation: Optional[Callable[[Array], Array]] = None
  implementation: str = "auto"
  block_size: int = fast_lib.DEFAULT_BLOCK

  def __post_init__(self):
    if not isinstance(self.num_heads, (int, np.integer)) or self.num_heads < 1:
      raise ValueError(f"num_heads must be a positive integer, got {self.num_heads!r}")
    if self.qkv_features is not None and self.qkv_features % self.num_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must divide qkv_features "
                       f"({self.qkv_features})")
    check_attention_fields(normalization=self.normalization, hybrid_init=self.hybrid_init,
                           sinkhorn_iters=self.sinkhorn_iters, dropout_rate=self.dropout_rate,
                           implementation=self.implementation)
    if isinstance(self.block_size, bool) or not isinstance(self.block_size, (int, np.integer)) \
        or self.block_size < 1:
      raise ValueError(f"block_size must be a positive integer, got {self.block_size!r}")
    super().__post_init__()

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_k: Optional[Array] = None,
               inputs_v: Optional[Array] = None, *, mask: Optional[Array] = None,
               deterministic: Optional[bool] = None, dropout_rng: Optional[Array] = None,
               sow_weights: bool = False, query_mask: Optional[Array] = None,
               key_mask: Optional[Array] = None, causal: bool = False,
               hybrid_weight: Optional[Array] = None,
               padding_mask: Optional[Array] = None) -> Array:
    """Attend from ``inputs_q [..., q, features]`` to ``inputs_k``/``inputs_v`` (default: self).

    ``mask`` is boolean, broadcastable to ``[..., num_heads, q, k]``, True = attend. The
    structured masks ``query_mask [..., q]``, ``key_mask [..., k]`` (True = valid) and ``causal``
    (aligned at the ends: query i sees the keys j <= i + k - q) combine with it and also work on
    the fast path. ``padding_mask [..., n]`` (True = real
    token) is the one for padded self-attention: it masks the queries and the keys alike, as
    DNAS, HNAS and Sinkhorn need (they also normalise over the queries, so a key mask alone lets
    padding change the real outputs). Cross-attention (``inputs_k``/``inputs_v`` not
    ``inputs_q``) has two paddings, so there it is an error: pass ``query_mask`` and
    ``key_mask``. ``hybrid_weight [num_heads]`` supplies HNAS's u from the caller instead of
    this module's parameter (a model whose layers share all other parameters keeps one u per
    layer, as ALBERT with HNAS does).
    """
    if hybrid_weight is not None and self.normalization != "hnas":
      raise ValueError(f"hybrid_weight is HNAS's u, but normalization={self.normalization!r}")
    if hybrid_weight is not None and jnp.shape(hybrid_weight) != (self.num_heads,):
      raise ValueError(f"hybrid_weight must have shape ({self.num_heads},) (one u per head), "
                       f"got {jnp.shape(hybrid_weight)}")
    if padding_mask is not None:
      if any(x is not None and x is not inputs_q for x in (inputs_k, inputs_v)):
        raise ValueError("padding_mask is for self-attention (it masks queries and keys alike); "
                         "for cross-attention pass query_mask and key_mask")
      query_mask, key_mask = padding_masks(padding_mask, query_mask, key_mask,
                                           inputs_q.shape[-2])
    if inputs_k is None:
      if inputs_v is not None:
        raise ValueError("inputs_k cannot be None if inputs_v is given")
      inputs_k = inputs_q
    if inputs_v is None:
      inputs_v = inputs_k
    features = self.out_features or inputs_q.shape[-1]
    qkv_features = self.qkv_features or inputs_q.shape[-1]
    if qkv_features % self.num_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must divide the qkv width ({qkv_features})")
    head_dim = qkv_features // self.num_heads

    dense = functools.partial(
        nn.DenseGeneral, axis=-1, dtype=self.dtype, param_dtype=self.param_dtype,
        features=(self.num_heads, head_dim), kernel_init=self.kernel_init,
        bias_init=self.bias_init, use_bias=self.use_bias, precision=self.precision)
    query = dense(name="query")(inputs_q)
    key = dense(name="key")(inputs_k)
    value = dense(name="value")(inputs_v)

    scale = self.scale_logits if self.scale_logits is not None else self.normalization != "nap"
    if scale:
      query = query / jnp.sqrt(head_dim).astype(query.dtype)

    extra = self._extra_params(hybrid_weight)
    dropout_active = self.dropout_rate > 0.0 and not nn.merge_param(
        "deterministic", self.deterministic, deterministic)
    num_logits = int(np.prod(query.shape[:-1])) * key.shape[-3]
    if self._fast(mask, sow_weights, dropout_active, query.shape[-3], key.shape[-3], head_dim,
                  causal, num_logits):
      to_heads = lambda x: jnp.swapaxes(x, -2, -3)  # [..., n, h, d] -> [..., h, n, d]
      heads = to_heads(compute_fast(
          to_heads(query), to_heads(key), to_heads(value), self.normalization,
          query_mask=query_mask, key_mask=key_mask, causal=causal, **extra,
          sinkhorn_iters=self.sinkhorn_iters, block_size=self.block_size))
      return self._output(heads.astype(value.dtype), features)

    mask = structured_mask(mask, query_mask, key_mask, causal, query.shape[-3], key.shape[-3])
    logits = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=self.precision)
    weights = compute_weights(logits, self.normalization, mask, **extra,
                              sinkhorn_iters=self.sinkhorn_iters)
    if sow_weights:
      self.sow("intermediates", "attention_weights", weights)

    if dropout_active:
      if dropout_rng is None:
        dropout_rng = self.make_rng("dropout")
      keep_prob = 1.0 - self.dropout_rate
      shape = weights.shape
      if self.broadcast_dropout:  # one mask shared by the batch and the heads, as flax does
        shape = (1,) * (weights.ndim - 2) + weights.shape[-2:]
      keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
      weights = weights * (keep / keep_prob).astype(weights.dtype)

    heads = jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=self.precision)
    return self._output(heads, features)

  def _fast(self, mask, sow_weights, dropout_active, q_len, k_len, head_dim, causal,
            num_logits) -> bool:
    """Whether this call takes the fast path (see ``implementation``)."""
    if self.implementation == "quadratic":
      return False
    blockers = [name for name, present in (("a dense mask", mask is not None),
                                           ("sow_weights", sow_weights),
                                           ("attention dropout", dropout_active)) if present]
    if self.implementation == "fast":
      if blockers:
        raise ValueError(f"implementation='fast' never forms the weights, so it cannot take "
                         f"{', '.join(blockers)}; pass padding_mask/query_mask/key_mask/causal "
                         f"or use implementation='quadratic'")
      return True
    return not blockers and fast_is_faster(self.normalization, q_len, k_len, head_dim, causal,
                                           num_logits)

  def _output(self, heads: Array, features: int) -> Array:
    heads = self._head_transform(heads)
    return nn.DenseGeneral(
        features=features, axis=(-2, -1), kernel_init=self.out_kernel_init or self.kernel_init,
        bias_init=self.out_bias_init or self.bias_init, use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, precision=self.precision, name="out")(heads)

  def _extra_params(self, hybrid_weight: Optional[Array] = None) -> dict:
    if self.normalization == "hnas":
      u = hybrid_weight if hybrid_weight is not None else self.param(
          "hybrid_weight", nn.initializers.constant(self.hybrid_init), (self.num_heads,),
          self.param_dtype)
      return {"hybrid_weight": straight_through_clip(u)}
    if self.normalization == "nap":
      return {"nap_gain": self.param("nap_gain", nn.initializers.ones, (self.num_heads,),
                                     self.param_dtype),
              "nap_bias": self.param("nap_bias", nn.initializers.zeros, (self.num_heads,),
                                     self.param_dtype)}
    return {}

  def _head_transform(self, heads: Array) -> Array:
    """LayerNorm and activation over the concatenated heads ``[..., q, heads, head_dim]``."""
    if not self.head_norm and self.head_activation is None:
      return heads
    shape = heads.shape
    x = heads.reshape(shape[:-2] + (shape[-2] * shape[-1],))
    if self.head_norm:
      x = LayerNorm(epsilon=self.head_norm_epsilon, param_dtype=self.param_dtype,
                    name="head_norm")(x)
    if self.head_activation is not None:
      x = self.head_activation(x)
    return x.reshape(shape)
