"""``MultiHeadAttention``: flax.linen multi-head attention with a choice of normalisation.

With ``normalization="softmax"`` it is a drop-in for ``flax.linen.MultiHeadDotProductAttention``:
same constructor fields (``decode``, ``normalize_qk``, ``force_fp32_for_softmax``, the
``*_dot_general`` and einsum fields included; a custom ``attention_fn`` is refused, the weights
come from ``normalization``), call convention (``inputs_kv`` too), parameter names and shapes
(``query``, ``key``, ``value``, ``out``, ``query_ln``/``key_ln``), decode cache, and the same
output for the same params tree.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import fast as fast_lib
from normattn_jax.attention import fused as fused_lib
from normattn_jax.attention.module_spec import (IMPLEMENTATIONS, OUTPUT_GATES,  # noqa: F401
                                                QK_NORMS, first_problem)
from normattn_jax.attention.registry import AttentionSpec, causal_safe_names, fusable
from normattn_jax.attention.registry import straight_through_clip  # noqa: F401 (public here)
from normattn_jax.dropout import check_rate, divided, draws
from normattn_jax.norms import LayerNorm
from normattn_jax.validation import check_int

Array = jax.Array
default_kernel_init = nn.linear.default_kernel_init


DIFF_NORM_EPSILON = 1e-5  # the per-head RMSNorm of differential attention (Ye et al.'s code)
LAMBDA_INIT_STD = 0.1     # the normal init of its lambda vectors (Ye et al.'s code)


def lambda_init(layer_index: int) -> float:
  """Differential attention's lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) (Ye et al. 2024, Eq. 2).

  Args:
    layer_index: the layer's depth l, counted from 1.

  Returns:
    lambda_init, in [0.2, 0.8).
  """
  return 0.8 - 0.6 * float(np.exp(-0.3 * (layer_index - 1)))


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


def takes_fast_path(normalization: Union[str, AttentionSpec], implementation: str,
                    blockers, q_len: int, k_len: int, head_dim: int, causal: bool,
                    num_logits: int = 0, structured: str = "structured masks") -> bool:
  """Whether a call takes the fast path: never for "quadratic" or "fused", always for "fast"
  (refusing what it cannot take), for "auto" where nothing blocks it and ``fast_is_faster`` says
  so (the callers ask ``fused.takes_fused_path`` first).

  Args:
    normalization: a registered normalisation's name, or its ``AttentionSpec``.
    implementation: one of ``IMPLEMENTATIONS``.
    blockers: the names of what this call has that the fast path cannot take (a dense mask,
      sow_weights, attention dropout), empty if none.
    q_len: the number of queries.
    k_len: the number of keys.
    head_dim: the size of each head.
    causal: whether the attention is causal.
    num_logits: the number of logits of the call (0: unknown).
    structured: the masks the caller can pass instead, for the error message.

  Returns:
    True to take the fast path.

  Raises:
    ValueError: for implementation="fast" where the normalisation has no fast path or a
      blocker is present.
  """
  if implementation in ("quadratic", "fused"):
    return False
  if implementation == "fast":
    if AttentionSpec.of(normalization).normalization.fast is None:
      raise ValueError(f"normalization {normalization!r} has no fast path; use "
                       f"implementation='quadratic' or 'auto'")
    if blockers:
      raise ValueError(f"implementation='fast' never forms the weights, so it cannot take "
                       f"{', '.join(blockers)}; pass {structured} or use "
                       f"implementation='quadratic'")
    return True
  return not blockers and fast_is_faster(normalization, q_len, k_len, head_dim, causal,
                                         num_logits)


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


def taking_part(mask, query_mask, key_mask, batch_rank: int) -> tuple:
  """Which queries and which keys take part in the attention at all: a query whose every key is
  masked, or a key that every query is denied (padding), gets weight 0 in any normalisation.

  Args:
    mask: dense boolean mask broadcastable to ``[..., h, q, k]``, or None.
    query_mask: boolean ``[..., q]``, or None.
    key_mask: boolean ``[..., k]``, or None.
    batch_rank: the number of batch axes of the inputs (``inputs.ndim - 2``), to tell a dense
      mask's head axis from its batch axes.

  Returns:
    ``(queries [..., q] or None, keys [..., k] or None)``, boolean; None where nothing is masked.
  """
  queries, keys = query_mask, key_mask
  if mask is not None:
    mask = jnp.asarray(mask)
    if mask.ndim == batch_rank + 3:  # [..., h, q, k]: a position takes part in some head
      mask = mask.any(-3)
    and_ = lambda a, b: b if a is None else a & b
    queries, keys = and_(queries, mask.any(-1)), and_(keys, mask.any(-2))
  return queries, keys


def zero_outside(x: Array, valid: Optional[Array]) -> Array:
  """``x [..., n, features]`` with the positions where ``valid [..., n]`` is False set to 0:
  padding that holds NaN or inf never reaches a real output or a gradient (0 weight times NaN
  is NaN, and so is the projections' gradient ``x^T g`` at a NaN position)."""
  return x if valid is None else jnp.where(valid[..., None], x, jnp.zeros((), x.dtype))


def _less_lambda(parts: list, lam: Optional[Array]) -> Array:
  """Differential attention's ``parts[0] - lambda * parts[1]`` (the two maps' weights or
  outputs); the one part without it (``lam`` None)."""
  return parts[0] if lam is None else parts[0] - lam.astype(parts[1].dtype) * parts[1]


def check_decodable(normalization: Union[str, AttentionSpec]) -> None:
  """Refuse step-by-step decoding for a normalisation that normalises over the queries.

  A key/value cache gives a query the keys before it, never the queries after it; DNAS, HNAS
  and Sinkhorn also normalise each key's weights over the queries, so their rows need those.

  Args:
    normalization: a registered normalisation's name, or its ``AttentionSpec``.

  Raises:
    ValueError: naming the normalisation, for one whose ``normalizes_over_queries`` is set.
  """
  spec = AttentionSpec.of(normalization)
  if spec.normalization.normalizes_over_queries:
    raise ValueError(f"decode=True is not supported with normalization={str(spec)!r}: it also "
                     f"normalises each key's weights over the queries, so a query's weights "
                     f"depend on queries not yet decoded and a key/value cache cannot give them. "
                     f"Nor can a causal mask over the whole sequence: there each position's "
                     f"output depends on the later positions (it is not causal-safe). Decode "
                     f"with a causal-safe normalisation ({', '.join(causal_safe_names())})")


# flax's own words for its call's pitfalls (flax.linen.MultiHeadDotProductAttention): the
# deprecated ``inputs_kv``, ``inputs_v`` without ``inputs_k``, a mask passed as ``inputs_v``; so
# that code and tests written against flax's see the same.
INPUTS_KV_WITH_K_OR_V = (
    "If either `inputs_k` or `inputs_v` is not None, `inputs_kv` must be None. If `inputs_kv` is "
    "not None, both `inputs_k` and `inputs_v` must be None. We recommend using `inputs_k` and "
    "`inputs_v` args, since `inputs_kv` will be deprecated soon. See "
    "https://github.com/google/flax/discussions/3389 for more information.")
INPUTS_V_WITHOUT_K = (
    "`inputs_k` cannot be None if `inputs_v` is not None. To have both `inputs_k` and `inputs_v` "
    "be the same value, pass in the value to `inputs_k` and leave `inputs_v` as None.")
MASK_AS_INPUTS_V = (
    "You are passing an array of shape {shape} to the `inputs_v` arg, when you may have intended "
    "to pass it to the `mask` arg. As of Flax version 0.7.4, the function signature of "
    "MultiHeadDotProductAttention's `__call__` method has changed to `__call__(inputs_q, "
    "inputs_k=None, inputs_v=None, *, inputs_kv=None, mask=None, deterministic=None)`. Use the "
    "kwarg `mask` instead. See https://github.com/google/flax/discussions/3389 and read the "
    "docstring for more information.")
INPUTS_KV_DEPRECATED = (
    "The inputs_kv arg will be deprecated soon. Use inputs_k and inputs_v instead. See "
    "https://github.com/google/flax/discussions/3389 for more information.")


def flax_mask(mask) -> Optional[Array]:
  """A dense mask as flax's modules take it: boolean, or numbers whose nonzero entries attend
  (``nn.make_attention_mask`` and ``nn.make_causal_mask`` give float32 0/1 masks).

  Args:
    mask: the mask, or None.

  Returns:
    The boolean mask, or None.

  Raises:
    ValueError: for a concrete numeric mask with values other than 0 and 1 (a traced one is
      taken as flax takes it, nonzero = attend).
  """
  if mask is None:
    return None
  mask = jnp.asarray(mask)
  if mask.dtype == jnp.bool_:
    return mask
  if not isinstance(mask, jax.core.Tracer):
    values = np.unique(np.asarray(mask))
    if not np.isin(values, (0, 1)).all():
      raise ValueError(f"mask must be boolean or flax's 0/1 mask (1 = attend), got a "
                       f"{mask.dtype} mask with the values {values[:6].tolist()}")
  return mask != 0


def check_cache_room(index, max_length: int) -> Array:
  """Refuse a decode step past the cache: flax's modules would write the last slot again and
  return outputs of a sequence that is not the one decoded.

  Args:
    index: the cache's index before the step (the number of positions written).
    max_length: the cache's length.

  Returns:
    1.0 where the step fits, NaN where it does not: a traced index (inside ``jit``) cannot be
    refused, so the step's outputs are multiplied by this and turn NaN.

  Raises:
    ValueError: for a concrete index at ``max_length`` or past it, with both numbers.
  """
  if not isinstance(index, jax.core.Tracer):
    if int(index) >= max_length:
      raise ValueError(f"decode step {int(index) + 1} does not fit the cache of max_length "
                       f"{max_length}: its {max_length} positions are written (init_cache with "
                       f"a longer input, or start a new cache)")
  return jnp.where(index < max_length, 1.0, jnp.nan)


def keys_and_values(inputs_q: Array, inputs_k: Optional[Array], inputs_v: Optional[Array],
                    inputs_kv: Optional[Array]) -> tuple:
  """flax's defaults of the keys' and values' inputs: ``inputs_kv`` (deprecated) for both,
  else ``inputs_k`` (default ``inputs_q``) and ``inputs_v`` (default ``inputs_k``).

  Args:
    inputs_q: the queries' inputs.
    inputs_k: the keys' inputs, or None.
    inputs_v: the values' inputs, or None.
    inputs_kv: the keys' and values' inputs (flax's deprecated alias), or None.

  Returns:
    ``(inputs_k, inputs_v)``.

  Raises:
    ValueError: for ``inputs_kv`` with ``inputs_k`` or ``inputs_v``, or ``inputs_v`` without
      ``inputs_k``.
  """
  if inputs_kv is not None:
    if inputs_k is not None or inputs_v is not None:
      raise ValueError(INPUTS_KV_WITH_K_OR_V)
    warnings.warn(INPUTS_KV_DEPRECATED, DeprecationWarning)
    return inputs_kv, inputs_kv
  if inputs_k is None:
    if inputs_v is not None:
      raise ValueError(INPUTS_V_WITHOUT_K)
    inputs_k = inputs_q
  if inputs_v is None:
    return inputs_k, inputs_k
  if inputs_v.shape[-1] == inputs_v.shape[-2]:  # flax's guess: a mask passed where it once went
    warnings.warn(MASK_AS_INPUTS_V.format(shape=inputs_v.shape), DeprecationWarning)
  return inputs_k, inputs_v


def check_flax_fields(*, attention_fn: Callable, decode: bool, normalize_qk: bool,
                      force_fp32_for_softmax: bool, qk_norm: Optional[str], precision: Any,
                      qk_attn_weights_einsum_cls: Optional[Callable],
                      attn_weights_value_einsum_cls: Optional[Callable]) -> None:
  """Refuse flax's ``MultiHeadDotProductAttention`` fields that this module cannot honour.

  Args:
    attention_fn: must be flax's ``dot_product_attention`` (the weights come from
      ``normalization``).
    decode: must be a bool.
    normalize_qk: must be a bool, and not set with ``qk_norm``.
    force_fp32_for_softmax: must be a bool.
    qk_norm: the module's own QK-norm (``QK_NORMS``).
    precision: the einsums' precision; flax refuses it with the einsum classes.
    qk_attn_weights_einsum_cls: the logits' einsum factory, or None.
    attn_weights_value_einsum_cls: the weighted sum's einsum factory, or None; set with the
      other one or not at all, as flax asks.

  Raises:
    ValueError: naming the first field refused and its value.
  """
  if attention_fn is not nn.dot_product_attention:
    raise ValueError(f"attention_fn={attention_fn!r}: this module computes the attention from "
                     f"normalization= (register a Normalization for other weights); use "
                     f"flax.linen.MultiHeadDotProductAttention for a custom attention_fn")
  for name, value in (("decode", decode), ("normalize_qk", normalize_qk),
                      ("force_fp32_for_softmax", force_fp32_for_softmax)):
    if not isinstance(value, (bool, np.bool_)):
      raise ValueError(f"{name} must be True or False, got {value!r}")
  if normalize_qk and qk_norm is not None:
    raise ValueError(f"normalize_qk=True is flax's LayerNorm QK-norm without bias; it cannot be "
                     f"set with qk_norm={qk_norm!r} (set one of the two)")
  if (qk_attn_weights_einsum_cls is None) != (attn_weights_value_einsum_cls is None):
    raise ValueError("qk_attn_weights_einsum_cls and attn_weights_value_einsum_cls must be set "
                     "together")
  if qk_attn_weights_einsum_cls is not None and precision is not None:
    raise ValueError(f"precision={precision!r} and the einsum classes are exclusive (as in "
                     f"flax): the einsum classes set their own precision")


def check_attention_fields(*, normalization: Union[str, AttentionSpec], dropout_rate: float,
                           implementation: str = "auto", output_gate: Optional[str] = None,
                           qk_norm: Optional[str] = None, differential: bool = False,
                           layer_index: int = 1, head_dim: Optional[int] = None) -> None:
  """Refuse ``MultiHeadAttention`` fields out of range, before any parameter is made.

  Args:
    normalization: a registered normalisation's name, or an ``AttentionSpec`` whose options
      its normalisation accepts.
    dropout_rate: the attention dropout rate, must lie in [0, 1) (a traced rate: each
      model's own in a grid, ``normattn_jax.dropout``).
    implementation: must be one of ``IMPLEMENTATIONS``.
    output_gate: must be one of ``OUTPUT_GATES``.
    qk_norm: must be one of ``QK_NORMS``.
    differential: must be a bool.
    layer_index: the layer's depth, counted from 1 (differential attention's lambda_init).
    head_dim: the width of each head where known (differential attention needs it even);
      None skips that check.

  Raises:
    ValueError: naming the first field out of range (``registry.get``'s error for an unknown
      normalisation, ``Normalization.resolve_options``' for an option), or
      implementation="fused" with a normalisation that has no fused path.
  """
  check_module_options(output_gate=output_gate, qk_norm=qk_norm, differential=differential,
                       layer_index=layer_index, head_dim=head_dim)
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
  spec = AttentionSpec.of(normalization)
  spec.resolved()
  check_fusable(spec, implementation)
  check_rate(dropout_rate)


def check_fusable(normalization: Union[str, AttentionSpec], implementation: str,
                  field: str = "implementation") -> None:
  """Refuse implementation="fused" for a normalisation without a fused path, before anything is
  built or compiled.

  Args:
    normalization: a registered normalisation's name, or its ``AttentionSpec``.
    implementation: the requested implementation.
    field: the name of the implementation's field, for the message.

  Raises:
    ValueError: naming the normalisation, the field and the fusable normalisations.
  """
  spec = AttentionSpec.of(normalization)
  if implementation == "fused" and spec.normalization.fused is None:
    raise ValueError(f"{field}='fused': normalization {spec.name!r} cannot be fused (its weights "
                     f"are not softmax attention with per-key offsets); the fusable ones are "
                     f"{fusable()}")


def check_module_options(*, output_gate: Optional[str] = None, qk_norm: Optional[str] = None,
                         differential: bool = False, layer_index: int = 1,
                         head_dim: Optional[int] = None) -> None:
  """Refuse the output gate, QK-norm and differential options out of range.

  Args:
    output_gate: must be one of ``OUTPUT_GATES``.
    qk_norm: must be one of ``QK_NORMS``.
    differential: must be a bool.
    layer_index: must be an integer >= 1.
    head_dim: the width of each head where known, which ``differential`` needs even; or None.

  Raises:
    ValueError: naming the first field out of range and its value.
  """
  problem = first_problem({"implementation": "auto", "output_gate": output_gate,
                           "qk_norm": qk_norm, "differential": differential})
  if problem:
    name, value, why = problem
    raise ValueError(f"{name} {why}, got {value!r}")
  check_int("layer_index", layer_index)
  if differential and head_dim is not None and head_dim % 2:
    raise ValueError(f"differential=True splits each head's query and key features in two maps, "
                     f"so the head width must be even, got {head_dim}")


class MultiHeadAttention(nn.Module):
  """Multi-head attention whose weights come from any registered normalisation.

  A drop-in for :class:`flax.linen.MultiHeadDotProductAttention`: its fields, call (masks,
  dropout, ``decode``, ``sow_weights``), parameter names and shapes (``query``, ``key``,
  ``value``, ``out``; ``query_ln``/``key_ln`` with ``normalize_qk``) and decode cache are
  flax's, and with ``normalization="softmax"`` it gives flax's outputs from flax's parameters.
  One field chooses the weights, ``normalization``; the others after it are optional additions
  that default off, adding no parameter. A normalisation's per-head parameters join the params
  tree by name (NAP: ``nap_gain`` and ``nap_bias``, HNAS: ``hybrid_weight``, each
  ``[num_heads]``). :class:`normattn_jax.nnx.MultiHeadAttention` is the same for
  :class:`flax.nnx.MultiHeadAttention`.

  Example::

    layer = MultiHeadAttention(num_heads=4, normalization="dnas")
    params = layer.init(jax.random.key(0), x)                  # x: [batch, length, features]
    y = layer.apply(params, x, padding_mask=jnp.arange(x.shape[1]) < 7)

  Attributes:
    num_heads: the number of heads; it divides ``qkv_features``.
    dtype: the dtype of the computation (None: inferred from the inputs and params).
    param_dtype: the dtype of the parameters.
    qkv_features: the width of the queries, keys and values over all heads (None: the
      inputs' width).
    out_features: the width of the output (None: the inputs' width).
    broadcast_dropout: one attention-dropout mask shared by the batch and the heads.
    dropout_rate: the dropout rate of the attention weights, in [0, 1); may be traced (each
      model's own in a grid: ``normattn_jax.dropout``).
    deterministic: no dropout when True; None: ``__call__``'s ``deterministic`` decides.
    precision: the matmuls' precision (:class:`jax.lax.Precision`); the fused path uses its
      kernel's own.
    kernel_init: the initialiser of the projections' kernels.
    out_kernel_init: the output projection's kernel initialiser (None: ``kernel_init``).
    bias_init: the initialiser of the projections' biases.
    out_bias_init: the output projection's bias initialiser (None: ``bias_init``).
    use_bias: whether the projections have biases.
    attention_fn: must stay :func:`flax.linen.dot_product_attention` (the weights come from
      ``normalization``; a custom function is refused).
    decode: flax's autoregressive cache (collection "cache": ``cached_key``, ``cached_value``
      ``[..., max_length, heads, head_dim]``, ``cache_index``): ``init`` with the full-length
      input makes it; each ``apply(..., mutable=["cache"])`` then takes one position and
      attends to the positions stored so far. Refused for the normalisations that normalise
      over the queries (``Normalization.normalizes_over_queries``: DNAS, HNAS, Sinkhorn).
    normalize_qk: flax's QK-norm, a LayerNorm without bias of the queries and keys
      (``query_ln``, ``key_ln``, epsilon ``qk_norm_epsilon``); not with ``qk_norm``.
    force_fp32_for_softmax: compute the weights from float32 (at least) logits and keep them
      in float32 into the weighted sum, as flax does; the fast paths' outputs are float32 then.
    qkv_dot_general: the ``dot_general`` of the query, key, value (and gate) projections.
    out_dot_general: the ``dot_general`` of the output projection.
    qkv_dot_general_cls: a factory of ``qkv_dot_general``.
    out_dot_general_cls: a factory of ``out_dot_general``.
    qk_attn_weights_einsum_cls: a factory of the logits' einsum (quadratic path only: the fast
      and fused paths form no weights); set with ``attn_weights_value_einsum_cls``.
    attn_weights_value_einsum_cls: a factory of the weighted sum's einsum.
    normalization: a registered name (``attention.names()``; the built-ins and their
      properties are tabled in :doc:`/guides/normalisations`) at its default options, or an
      :class:`~normattn_jax.attention.AttentionSpec` that sets them, e.g.
      ``AttentionSpec("sinkhorn", {"sinkhorn_iters": 5})``.
    scale_logits: divide the logits by sqrt(head_dim); None: the normalisation's own choice
      (yes except NAP, whose normalisation makes the scale moot, as in its paper's code).
    head_norm: a LayerNorm over the concatenated head outputs before the output projection
      (the MTE/NAP attention sub-module).
    head_norm_epsilon: its epsilon.
    head_activation: an activation after it (e.g. ``nn.gelu``), or None.
    implementation: "quadratic" forms the weights; "fast" takes the exact path of
      ``attention.fast`` that never forms them (linear-time NAP/NON, O(N)-memory DNAS, HNAS,
      Sinkhorn and the row-wise ones), so it takes the structured masks (``padding_mask``,
      ``query_mask``, ``key_mask``, ``causal``) but no dense ``mask``, no attention dropout and
      no ``sow_weights``; "fused" runs :func:`jax.nn.dot_product_attention` (cuDNN's flash
      kernel on an NVIDIA GPU in bf16/fp16, XLA's elsewhere) for the normalisations that are
      softmax attention with per-key offsets (``attention.fusable()``), with the fast path's
      limits except that the row-wise ones also take a dense ``mask``; "auto" (default) takes
      the fused path where its kernel would be cuDNN's from ``fused.AUTO_MIN_KEYS`` keys on,
      else the fast path where nothing blocks it and it pays (``fast_is_faster``). The same
      parameters on every path.
    block_size: queries per block of the blockwise fast and fused paths.
    output_gate: None, "headwise" or "elementwise": gated attention (Qiu et al. 2025), the
      attention output times ``sigmoid(inputs_q W_g + b_g)``, one gate per head and query or
      per head and feature, before ``head_norm`` and the output projection (params: ``gate``).
    qk_norm: None, "rms" or "layer": an RMSNorm (no bias) or LayerNorm of each head's queries
      and keys over head_dim before the logit scaling (the QK-norm of Gemma 3 and ViT-22B),
      one learned scale (and bias) per head feature shared by the heads (``query_norm``,
      ``key_norm``); the fast paths take it too.
    qk_norm_epsilon: the epsilon of ``qk_norm`` and ``normalize_qk``.
    differential: differential attention (Ye et al. 2024): each head's query and key features
      split in halves, the weights ``N(Q1 K1^T s) - lambda N(Q2 K2^T s)`` with ``N`` the
      normalisation, ``lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init``, each head's
      output through an RMSNorm times ``1 - lambda_init`` (params: ``lambda_q1``,
      ``lambda_k1``, ``lambda_q2``, ``lambda_k2``, ``diff_norm``); the head width must be even.
    layer_index: the layer's depth from 1, for ``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))``.
    allow_future_leak: compute a causal call (``causal=True``, or a dense causal ``mask``
      where it is concrete) with a normalisation that is not causal-safe (DNAS, HNAS, Sinkhorn:
      ``Normalization.causal_safe``), whose outputs then depend on later positions; without it
      such a call is refused. A mask traced inside ``jit`` cannot be read before it runs and is
      not checked (``attention.causality``): say ``causal=True`` there.
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
  attention_fn: Callable[..., Array] = nn.dot_product_attention
  decode: bool = False
  normalize_qk: bool = False
  force_fp32_for_softmax: bool = False
  qkv_dot_general: Optional[Callable[..., Array]] = None
  out_dot_general: Optional[Callable[..., Array]] = None
  qkv_dot_general_cls: Any = None
  out_dot_general_cls: Any = None
  qk_attn_weights_einsum_cls: Optional[Callable[..., Callable[..., Array]]] = None
  attn_weights_value_einsum_cls: Optional[Callable[..., Callable[..., Array]]] = None
  normalization: Union[str, AttentionSpec] = "softmax"
  scale_logits: Optional[bool] = None
  head_norm: bool = False
  head_norm_epsilon: float = 1e-6
  head_activation: Optional[Callable[[Array], Array]] = None
  implementation: str = "auto"
  block_size: int = fast_lib.DEFAULT_BLOCK
  output_gate: Optional[str] = None
  qk_norm: Optional[str] = None
  qk_norm_epsilon: float = 1e-6
  differential: bool = False
  layer_index: int = 1
  allow_future_leak: bool = False

  def __post_init__(self):
    check_int("num_heads", self.num_heads)
    if self.qkv_features is not None and self.qkv_features % self.num_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must divide qkv_features "
                       f"({self.qkv_features})")
    check_attention_fields(
        normalization=self.normalization, dropout_rate=self.dropout_rate,
        implementation=self.implementation, output_gate=self.output_gate, qk_norm=self.qk_norm,
        differential=self.differential, layer_index=self.layer_index,
        head_dim=None if self.qkv_features is None else self.qkv_features // self.num_heads)
    check_flax_fields(
        attention_fn=self.attention_fn, decode=self.decode, normalize_qk=self.normalize_qk,
        force_fp32_for_softmax=self.force_fp32_for_softmax, qk_norm=self.qk_norm,
        precision=self.precision, qk_attn_weights_einsum_cls=self.qk_attn_weights_einsum_cls,
        attn_weights_value_einsum_cls=self.attn_weights_value_einsum_cls)
    if self.decode:
      check_decodable(self.normalization)
    if not isinstance(self.allow_future_leak, (bool, np.bool_)):
      raise ValueError(f"allow_future_leak must be True or False, got {self.allow_future_leak!r}")
    if not self.qk_norm_epsilon > 0:
      raise ValueError(f"qk_norm_epsilon must be > 0, got {self.qk_norm_epsilon!r}")
    check_int("block_size", self.block_size)
    super().__post_init__()

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_k: Optional[Array] = None,
               inputs_v: Optional[Array] = None, *, inputs_kv: Optional[Array] = None,
               mask: Optional[Array] = None, deterministic: Optional[bool] = None,
               dropout_rng: Optional[Array] = None, sow_weights: bool = False,
               query_mask: Optional[Array] = None,
               key_mask: Optional[Array] = None, causal: bool = False,
               padding_mask: Optional[Array] = None,
               head_params: Optional[dict] = None) -> Array:
    """Attend from ``inputs_q`` to ``inputs_k`` and ``inputs_v`` (default: self-attention).

    The masks combine (a position is attended where every given one allows it) and, except
    the dense ``mask``, also work on the fast and fused paths. With ``decode`` (the cache
    made), a call takes one position: ``key_mask`` and a dense ``mask`` cover the cache's
    ``max_length`` keys, and ``padding_mask`` is refused.

    Args:
      inputs_q: the queries' inputs, ``[..., q, features]``.
      inputs_k: the keys' inputs, ``[..., k, features]``; None: ``inputs_q``.
      inputs_v: the values' inputs, ``[..., k, features]``; None: ``inputs_k``.
      inputs_kv: flax's deprecated alias of ``inputs_k`` and ``inputs_v`` both.
      mask: a dense mask broadcastable to ``[..., num_heads, q, k]``, True = attend; or flax's
        0/1 mask (1 = attend), as :func:`flax.linen.make_attention_mask` and
        :func:`flax.linen.make_causal_mask` give it.
      deterministic: no attention dropout when True; merged with the field of that name.
      dropout_rng: the key of the attention dropout (None: the module's "dropout" stream).
      sow_weights: store the weights used in the "intermediates" collection as
        ``attention_weights`` (quadratic path only).
      query_mask: ``[..., q]`` booleans, True = a valid query; the weights of an invalid one
        are 0 (and, for DNAS, HNAS and Sinkhorn, it takes no part in any key's normalisation).
      key_mask: ``[..., k]`` booleans, True = a valid key.
      causal: query i attends to the keys j <= i + k - q (the sequences aligned at their
        ends, as a query continuing a key cache). DNAS, HNAS and Sinkhorn also normalise each
        key over all the queries, later ones included, so their causal outputs still depend
        on later positions: in a decoder use a row-wise normalisation (the table's
        "causal-safe").
      padding_mask: ``[..., n]`` booleans, True = a real token: for padded self-attention it
        masks the queries and the keys alike, as DNAS, HNAS and Sinkhorn need (a key mask
        alone lets padding change their real outputs). Refused for cross-attention (pass
        ``query_mask`` and ``key_mask``) and in a decode step.
      head_params: ``{name: [num_heads]}``, the normalisation's per-head parameters from the
        caller in place of the module's own (HNAS's ``hybrid_weight``, NAP's ``nap_gain`` and
        ``nap_bias``: a model whose layers share their parameters keeps one per layer).

    Returns:
      The attention's output, ``[..., q, out_features]``, ``out_features`` the inputs' width
      unless the field sets it.

    Raises:
      ValueError: for a mask, input or per-head parameter of the wrong shape or kind, a
        ``padding_mask`` with cross-attention or in a decode step, a decode step past the
        cache, or a path that cannot take what the call asks (e.g. ``implementation="fast"``
        with a dense ``mask``), each naming what is refused.
    """
    norm = self.spec.normalization
    inputs_k, inputs_v = keys_and_values(inputs_q, inputs_k, inputs_v, inputs_kv)
    mask = flax_mask(mask)
    norm.check_causal(causal=causal, mask=mask, allow_future_leak=self.allow_future_leak,
                      name=str(self.spec))
    decoding = self.decode and self.has_variable("cache", "cached_key")
    head_params = self._check_head_params(norm, head_params or {})
    if padding_mask is not None:
      if any(x is not inputs_q for x in (inputs_k, inputs_v)):
        raise ValueError("padding_mask is for self-attention (it masks queries and keys alike); "
                         "for cross-attention pass query_mask and key_mask")
      if decoding:
        raise ValueError("padding_mask masks queries and keys of one length, but a decode step "
                         "has one query and the cache's max_length keys; pass key_mask "
                         "[..., max_length] (and query_mask) instead")
      query_mask, key_mask = padding_masks(padding_mask, query_mask, key_mask,
                                           inputs_q.shape[-2])
    if not decoding:  # a step's key mask covers the cache, not its one position
      queries, keys = taking_part(mask, query_mask, key_mask, inputs_q.ndim - 2)
      inputs_q, inputs_k, inputs_v = (zero_outside(inputs_q, queries),
                                      zero_outside(inputs_k, keys), zero_outside(inputs_v, keys))
    features = self.out_features or inputs_q.shape[-1]
    qkv_features = self.qkv_features or inputs_q.shape[-1]
    if qkv_features % self.num_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must divide the qkv width ({qkv_features})")
    head_dim = qkv_features // self.num_heads
    check_module_options(differential=self.differential, head_dim=head_dim)

    dense = functools.partial(
        nn.DenseGeneral, axis=-1, dtype=self.dtype, param_dtype=self.param_dtype,
        features=(self.num_heads, head_dim), kernel_init=self.kernel_init,
        bias_init=self.bias_init, use_bias=self.use_bias, precision=self.precision,
        dot_general=self.qkv_dot_general, dot_general_cls=self.qkv_dot_general_cls)
    query = dense(name="query")(inputs_q)
    key = dense(name="key")(inputs_k)
    value = dense(name="value")(inputs_v)

    # differential attention: each head's features as two maps of head_dim / 2
    map_dim = head_dim // 2 if self.differential else head_dim
    query, key = self._qk_norm(query, "query", map_dim), self._qk_norm(key, "key", map_dim)
    if self.decode:
      key, value, key_mask = self._decode(query, key, value, key_mask)
    if self.differential:  # [..., n, h, 2, head_dim / 2]
      query = query.reshape(query.shape[:-1] + (2, map_dim))
      key = key.reshape(key.shape[:-1] + (2, map_dim))
    scale = self.scale_logits if self.scale_logits is not None else norm.scale_logits
    if scale:
      query = query / jnp.sqrt(map_dim).astype(query.dtype)
    maps = ([(query[..., 0, :], key[..., 0, :]), (query[..., 1, :], key[..., 1, :])]
            if self.differential else [(query, key)])
    lam = self._lambda(map_dim) if self.differential else None
    if self.force_fp32_for_softmax:  # float32 weights make float32 heads, as in flax
      value = value.astype(jnp.promote_types(value.dtype, jnp.float32))

    params = self._head_params(norm, head_params)
    dropout_active = draws(self.dropout_rate) and not nn.merge_param(
        "deterministic", self.deterministic, deterministic)
    n_q, n_k = inputs_q.shape[-2], value.shape[-3]  # the keys: the cache's when decoding
    num_logits = int(np.prod(inputs_q.shape[:-1])) * self.num_heads * n_k * len(maps)
    if fused_lib.takes_fused_path(
        norm, self.implementation, fused_lib.blockers(
            norm, dense_mask=mask is not None, sow_weights=sow_weights, dropout=dropout_active),
        query.dtype, map_dim, num_keys=n_k, value_dim=head_dim, dense_mask=mask is not None,
        causal_unequal=causal and n_q != n_k, structured="padding_mask/query_mask/key_mask/causal"):
      outs = [norm.fused_attention(q, k, value, params, self._options(), mask=mask,
                                   query_mask=query_mask, key_mask=key_mask, causal=causal,
                                   block_size=self.block_size,
                                   allow_future_leak=self.allow_future_leak) for q, k in maps]
      return self._output(_less_lambda(outs, lam).astype(value.dtype), features, inputs_q)
    if self._fast(mask, sow_weights, dropout_active, n_q, n_k, map_dim, causal, num_logits):
      to_heads = lambda x: jnp.swapaxes(x, -2, -3)  # [..., n, h, d] -> [..., h, n, d]
      # the fast paths answer in the queries' dtype: value's (float32 with force_fp32_for_softmax)
      outs = [to_heads(norm.fast_attention(
          to_heads(q.astype(value.dtype)), to_heads(k), to_heads(value), params, self._options(),
          query_mask=query_mask, key_mask=key_mask, causal=causal, block_size=self.block_size,
          allow_future_leak=self.allow_future_leak)) for q, k in maps]
      return self._output(_less_lambda(outs, lam).astype(value.dtype), features, inputs_q)

    mask = structured_mask(mask, query_mask, key_mask, causal, n_q, n_k)
    logits_einsum, weighted_sum_einsum = self._einsums()
    weights = [norm.attention_weights(self._softmax_dtype(
        logits_einsum("...qhd,...khd->...hqk", q, k)), mask, params,
        self._options()) for q, k in maps]
    weights = _less_lambda(weights, lam)
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
      weights = weights * divided(keep, keep_prob, weights.dtype)

    heads = weighted_sum_einsum("...hqk,...khd->...qhd", weights, value)
    return self._output(heads, features, inputs_q)

  def _fast(self, mask, sow_weights, dropout_active, q_len, k_len, head_dim, causal,
            num_logits) -> bool:
    """Whether this call takes the fast path (see ``implementation``)."""
    blockers = [name for name, present in (("a dense mask", mask is not None),
                                           ("sow_weights", sow_weights),
                                           ("attention dropout", dropout_active),
                                           ("the einsum classes",
                                            self.qk_attn_weights_einsum_cls is not None))
                if present]
    return takes_fast_path(self.normalization, self.implementation, blockers, q_len, k_len,
                           head_dim, causal, num_logits,
                           structured="padding_mask/query_mask/key_mask/causal")

  def _output(self, heads: Array, features: int, inputs_q: Array) -> Array:
    """Differential attention's per-head norm, the output gate, the head transform and the
    output projection of ``heads [..., q, heads, head_dim]``."""
    if self.differential:
      heads = LayerNorm(kind="no_projection", epsilon=DIFF_NORM_EPSILON, use_bias=False,
                        param_dtype=self.param_dtype, name="diff_norm")(heads)
      heads = heads * jnp.asarray(1.0 - lambda_init(self.layer_index), heads.dtype)
    if self.output_gate is not None:
      width = (self.num_heads,) + ((heads.shape[-1],) if self.output_gate == "elementwise" else ())
      gate = nn.DenseGeneral(
          features=width, axis=-1, kernel_init=self.kernel_init, bias_init=self.bias_init,
          use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
          precision=self.precision, dot_general=self.qkv_dot_general,
          dot_general_cls=self.qkv_dot_general_cls, name="gate")(inputs_q)
      gate = jax.nn.sigmoid(gate)
      if self.output_gate == "headwise":
        gate = gate[..., None]
      heads = heads * gate.astype(heads.dtype)
    heads = self._head_transform(heads)
    return nn.DenseGeneral(
        features=features, axis=(-2, -1), kernel_init=self.out_kernel_init or self.kernel_init,
        bias_init=self.out_bias_init or self.bias_init, use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, precision=self.precision,
        dot_general=self.out_dot_general, dot_general_cls=self.out_dot_general_cls,
        name="out")(heads)

  def _qk_norm(self, x: Array, which: str, map_dim: int) -> Array:
    """``qk_norm`` (or flax's ``normalize_qk``) of the queries or keys ``[..., h, head_dim]``
    over each map's ``map_dim`` features (the head's, or half of it with ``differential``)."""
    if self.normalize_qk:  # flax's LayerNorm without bias, and its names
      norm = LayerNorm(epsilon=self.qk_norm_epsilon, use_bias=False,
                       param_dtype=self.param_dtype, name=f"{which}_ln")
    elif self.qk_norm is not None:
      norm = LayerNorm(kind="no_projection" if self.qk_norm == "rms" else "standard",
                       epsilon=self.qk_norm_epsilon, use_bias=self.qk_norm == "layer",
                       param_dtype=self.param_dtype, name=f"{which}_norm")
    else:
      return x
    return norm(x.reshape(x.shape[:-1] + (-1, map_dim))).reshape(x.shape)

  def _decode(self, query: Array, key: Array, value: Array, key_mask: Optional[Array]) -> tuple:
    """flax's autoregressive cache: made by the first (full-length) call; each later call
    writes its one position's key and value at ``cache_index`` and sees the positions written.
    A step past ``max_length`` is refused (``check_cache_room``: an error, or inside ``jit`` NaN
    values, so NaN outputs).

    Args:
      query: ``[..., 1, h, head_dim]`` once the cache is made.
      key: ``[..., n, h, head_dim]``, after any QK-norm (as flax caches them).
      value: ``[..., n, h, head_dim]``.
      key_mask: boolean ``[..., max_length]``, or None.

    Returns:
      ``(key, value, key_mask)``: the cache's keys and values and the mask of those written so
      far (and-ed with ``key_mask``); the inputs unchanged on the call that makes the cache.

    Raises:
      ValueError: for a query that is not one position of the cache's shape.
    """
    made = self.has_variable("cache", "cached_key")
    cached_key = self.variable("cache", "cached_key", jnp.zeros, key.shape, key.dtype)
    cached_value = self.variable("cache", "cached_value", jnp.zeros, value.shape, value.dtype)
    cache_index = self.variable("cache", "cache_index", lambda: jnp.array(0, dtype=jnp.int32))
    if not made:
      return key, value, key_mask
    *batch, max_length, heads, depth = cached_key.value.shape
    expected = tuple(batch) + (1, heads, depth)
    if query.shape != expected:
      raise ValueError(f"Autoregressive cache shape error, expected query shape {expected} "
                       f"instead got {query.shape}")
    index = cache_index.value
    room = check_cache_room(index, max_length)
    zero = jnp.zeros((), index.dtype)
    at = (zero,) * len(batch) + (index, zero, zero)
    cached_key.value = jax.lax.dynamic_update_slice(cached_key.value, key, at)
    cached_value.value = jax.lax.dynamic_update_slice(cached_value.value, value, at)
    cache_index.value = index + 1
    written = jnp.broadcast_to(jnp.arange(max_length) <= index, tuple(batch) + (max_length,))
    key_mask = written if key_mask is None else written & key_mask
    return cached_key.value, cached_value.value * room.astype(value.dtype), key_mask

  def _einsums(self) -> tuple:
    """The einsums of the logits and of the weighted sum: the einsum classes' (flax's
    ``*_einsum_cls`` fields), else ``jnp.einsum`` at ``precision``."""
    if self.qk_attn_weights_einsum_cls is not None:
      return self.qk_attn_weights_einsum_cls(), self.attn_weights_value_einsum_cls()
    einsum = functools.partial(jnp.einsum, precision=self.precision)
    return einsum, einsum

  def _softmax_dtype(self, logits: Array) -> Array:
    """The logits in float32 (at least) where ``force_fp32_for_softmax`` asks, so the weights
    are computed and kept in it."""
    if not self.force_fp32_for_softmax:
      return logits
    return logits.astype(jnp.promote_types(logits.dtype, jnp.float32))

  def _lambda(self, map_dim: int) -> Array:
    """Differential attention's scalar lambda of this layer (float32)."""
    init = nn.initializers.normal(LAMBDA_INIT_STD)
    vector = lambda name: self.param(name, init, (map_dim,), self.param_dtype).astype(
        jnp.float32)
    dot = lambda a, b: jnp.exp(jnp.sum(vector(a) * vector(b)))
    return (dot("lambda_q1", "lambda_k1") - dot("lambda_q2", "lambda_k2")
            + lambda_init(self.layer_index))

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
