"""``MultiHeadAttention``: flax.linen multi-head attention with a choice of normalisation.

With ``normalization="softmax"`` it is a drop-in for ``flax.linen.MultiHeadDotProductAttention``:
same constructor fields, call convention, parameter names and shapes (``query``, ``key``,
``value``, ``out``), and the same output for the same params tree.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import fast as fast_lib
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.attention.registry import straight_through_clip  # noqa: F401 (public here)
from normattn_jax.norms import LayerNorm
from normattn_jax.validation import check_int

Array = jax.Array
default_kernel_init = nn.linear.default_kernel_init


IMPLEMENTATIONS = ("auto", "quadratic", "fast")


def fast_is_faster(normalization: Union[str, AttentionSpec], q_len: int, k_len: int,
                   head_dim: int, causal: bool,
                   num_logits: int = 0) -> bool:
  """``implementation="auto"``'s rule: the registered normalisation's ``fast_pays_off``
  (measured by benchmarks/attention_scaling.py, BENCHMARKS.md); never without a fast path.

  Args:
    normalization: a registered normalisation's name, or its ``AttentionSpec``.
    q_len: the number of queries.
    k_len: the number of keys.
    head_dim: the size of each head.
    causal: whether the attention is causal.
    num_logits: the number of logits per head (0: unknown), passed to ``fast_pays_off``.

  Returns:
    True where the fast path exists and pays off.
  """
  norm = AttentionSpec.of(normalization).normalization
  return norm.fast is not None and bool(
      norm.fast_pays_off(q_len, k_len, head_dim, causal, num_logits))


def structured_mask(mask, query_mask, key_mask, causal, q_len, k_len):
  """One dense boolean mask from a dense ``mask`` and the structured ones (None if none).

  ``causal`` aligns the sequences at their ends, as the fast paths do (queries continuing a key
  cache): query i attends the keys j <= i + k_len - q_len.

  Args:
    mask: dense boolean mask broadcastable to ``[..., h, q_len, k_len]``, or None.
    query_mask: boolean ``[..., q_len]``, True = valid query, or None.
    key_mask: boolean ``[..., k_len]``, True = valid key, or None.
    causal: add the causal mask.
    q_len: the number of queries.
    k_len: the number of keys.

  Returns:
    The and of the given masks, boolean and broadcastable to ``[..., h, q_len, k_len]``, or
    None when no mask is given.
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
  over the queries, so a padded query would change the weights of the real ones.

  Args:
    padding_mask: boolean ``[..., length]``, True = real token.
    query_mask: boolean ``[..., length]`` to and with it, or None.
    key_mask: boolean ``[..., length]`` to and with it, or None.
    length: the sequence length.

  Returns:
    ``(query_mask, key_mask)``, each boolean ``[..., length]``.

  Raises:
    TypeError: if ``padding_mask`` is not boolean.
    ValueError: if its last axis is not ``length`` long.
  """
  padding_mask = jnp.asarray(padding_mask)
  if padding_mask.dtype != jnp.bool_:
    raise TypeError(f"padding_mask must be boolean (True = real token), got dtype "
                    f"{padding_mask.dtype}")
  if padding_mask.ndim < 1 or padding_mask.shape[-1] != length:
    raise ValueError(f"padding_mask of shape {padding_mask.shape} must end in the sequence "
                     f"length {length}")
  both = lambda m: padding_mask if m is None else jnp.asarray(m) & padding_mask
  return both(query_mask), both(key_mask)


def check_attention_fields(*, normalization: Union[str, AttentionSpec], dropout_rate: float,
                           implementation: str = "auto") -> None:
  """Refuse ``MultiHeadAttention`` fields out of range, before any parameter is made.

  Args:
    normalization: a registered normalisation's name, or an ``AttentionSpec`` whose options
      its normalisation accepts.
    dropout_rate: the attention dropout rate, must lie in [0, 1).
    implementation: must be one of ``IMPLEMENTATIONS``.

  Raises:
    ValueError: naming the first field out of range (``registry.get``'s error for an unknown
      normalisation, ``Normalization.resolve_options``' for an option).
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
  AttentionSpec.of(normalization).resolved()
  if not 0.0 <= dropout_rate < 1.0:
    raise ValueError(f"dropout_rate must lie in [0, 1), got {dropout_rate!r}")


class MultiHeadAttention(nn.Module):
  """Multi-head attention whose weights come from any registered normalisation.

  Extra fields beyond flax's:
    normalization: a name in ``registry.names()`` ("softmax" | "dnas" | "hnas" | "sinkhorn" |
      "nap" | "non" or one registered by the user) at its default options, or an
      ``AttentionSpec`` that sets them, e.g. ``AttentionSpec("sinkhorn", {"sinkhorn_iters": 5})``
      or ``AttentionSpec("hnas", {"hybrid_init": 0.0})`` (HNAS's initial u per head, kept in
      [0, 1] by a straight-through clip).
    scale_logits: divide the logits by sqrt(head_dim); None means the normalisation's own
      choice (yes except for NAP, whose normalisation makes the scale moot, as in its code).
    head_norm / head_norm_epsilon / head_activation: optional LayerNorm and activation on the
      concatenated head outputs before the output projection (the MTE/NAP attention sub-module).
    implementation: "quadratic" forms the weights; "fast" uses the exact paths of ``fast.py``
      (linear-time NAP/NON, O(N)-memory DNAS/HNAS/Sinkhorn), which never form them, so they
      take structured masks (``padding_mask``, ``query_mask``, ``key_mask``, ``causal``), no
      dense ``mask``, no attention dropout and no ``sow_weights``; "auto" (default) takes the
      fast path where it is allowed and ``fast_is_faster`` says it pays. Same params either way.
  The normalisation's per-head parameters join the params tree by name: NAP adds a scalar
  ``nap_gain`` (init 1) and ``nap_bias`` (init 0) per head; HNAS adds ``hybrid_weight``.
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
  normalization: Union[str, AttentionSpec] = "softmax"
  scale_logits: Optional[bool] = None
  head_norm: bool = False
  head_norm_epsilon: float = 1e-6
  head_activation: Optional[Callable[[Array], Array]] = None
  implementation: str = "auto"
  block_size: int = fast_lib.DEFAULT_BLOCK

  def __post_init__(self):
    check_int("num_heads", self.num_heads)
    if self.qkv_features is not None and self.qkv_features % self.num_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must divide qkv_features "
                       f"({self.qkv_features})")
    check_attention_fields(normalization=self.normalization, dropout_rate=self.dropout_rate,
                           implementation=self.implementation)
    check_int("block_size", self.block_size)
    super().__post_init__()

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_k: Optional[Array] = None,
               inputs_v: Optional[Array] = None, *, mask: Optional[Array] = None,
               deterministic: Optional[bool] = None, dropout_rng: Optional[Array] = None,
               sow_weights: bool = False, query_mask: Optional[Array] = None,
               key_mask: Optional[Array] = None, causal: bool = False,
               hybrid_weight: Optional[Array] = None,
               padding_mask: Optional[Array] = None,
               head_params: Optional[dict] = None) -> Array:
    """Attend from ``inputs_q [..., q, features]`` to ``inputs_k``/``inputs_v`` (default: self).

    ``mask`` is boolean, broadcastable to ``[..., num_heads, q, k]``, True = attend. The
    structured masks ``query_mask [..., q]``, ``key_mask [..., k]`` (True = valid) and ``causal``
    (aligned at the ends: query i sees the keys j <= i + k - q) combine with it and also work on
    the fast path. ``padding_mask [..., n]`` (True = real
    token) is the one for padded self-attention: it masks the queries and the keys alike, as
    DNAS, HNAS and Sinkhorn need (they also normalise over the queries, so a key mask alone lets
    padding change the real outputs). Cross-attention (``inputs_k``/``inputs_v`` not
    ``inputs_q``) has two paddings, so there it is an error: pass ``query_mask`` and
    ``key_mask``. ``head_params`` (name -> ``[num_heads]``) supplies per-head parameters of
    the normalisation from the caller instead of this module's own (a model whose layers share
    all other parameters keeps them per layer, as ALBERT with HNAS does); ``hybrid_weight`` is
    HNAS's u that way.
    """
    norm = self.spec.normalization
    if hybrid_weight is not None:
      if "hybrid_weight" not in norm.param_names:
        raise ValueError(f"hybrid_weight is HNAS's u, but normalization={self.normalization!r}")
      head_params = dict(head_params or {}, hybrid_weight=hybrid_weight)
    head_params = self._check_head_params(norm, head_params or {})
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

    scale = self.scale_logits if self.scale_logits is not None else norm.scale_logits
    if scale:
      query = query / jnp.sqrt(head_dim).astype(query.dtype)

    params = self._head_params(norm, head_params)
    dropout_active = self.dropout_rate > 0.0 and not nn.merge_param(
        "deterministic", self.deterministic, deterministic)
    num_logits = int(np.prod(query.shape[:-1])) * key.shape[-3]
    if self._fast(mask, sow_weights, dropout_active, query.shape[-3], key.shape[-3], head_dim,
                  causal, num_logits):
      to_heads = lambda x: jnp.swapaxes(x, -2, -3)  # [..., n, h, d] -> [..., h, n, d]
      heads = to_heads(norm.fast_attention(
          to_heads(query), to_heads(key), to_heads(value), params, self._options(),
          query_mask=query_mask, key_mask=key_mask, causal=causal, block_size=self.block_size))
      return self._output(heads.astype(value.dtype), features)

    mask = structured_mask(mask, query_mask, key_mask, causal, query.shape[-3], key.shape[-3])
    logits = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=self.precision)
    weights = norm.attention_weights(logits, mask, params, self._options())
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
      if self.spec.normalization.fast is None:
        raise ValueError(f"normalization {self.normalization!r} has no fast path; use "
                         f"implementation='quadratic' or 'auto'")
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

  @property
  def spec(self) -> AttentionSpec:
    """``normalization`` as an ``AttentionSpec``."""
    return AttentionSpec.of(self.normalization)

  def _options(self) -> dict:
    """Every option of the normalisation: the spec's, the rest at their defaults."""
    return self.spec.resolved()

  def _check_head_params(self, norm, head_params: dict) -> dict:
    for name, value in head_params.items():
      if name not in norm.param_names:
        raise ValueError(f"{name} is not a per-head parameter of normalization="
                         f"{self.normalization!r} (it has {norm.param_names})")
      if jnp.shape(value) != (self.num_heads,):
        raise ValueError(f"{name} must have shape ({self.num_heads},) (one per head), "
                         f"got {jnp.shape(value)}")
    return head_params

  def _head_params(self, norm, given: dict) -> dict:
    """The normalisation's per-head parameters: the caller's, else this module's own."""
    return {p.name: given[p.name] if p.name in given else self.param(
                p.name, p.init(self._options()), (self.num_heads,), self.param_dtype)
            for p in norm.params}

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
