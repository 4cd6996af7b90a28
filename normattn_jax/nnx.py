"""``MultiHeadAttention`` for Flax NNX: ``flax.nnx.MultiHeadAttention`` with a choice of
normalisation.

It subclasses flax's module, so the constructor, the state tree (``query``, ``key``, ``value``,
``out``, the dropout stream, the decode cache) and ``__call__`` (masks, dropout, ``decode``,
``sow_weights``, ``is_causal``) are flax's; only the attention between the projections is this
library's: the normalisation's weights (``registry.Normalization.attention_weights``) or its exact
fast path (``fast_attention``), chosen as the Linen ``normattn_jax.MultiHeadAttention`` chooses.
With ``normalization="softmax"`` it gives flax's outputs given flax's state, except in a query
row whose keys are all masked: flax spreads it evenly over the keys, the registry's masked
softmax gives it zero weights (as the Linen module does).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

import jax
import jax.numpy as jnp
from flax import linen, nnx
from flax.nnx import bridge
from flax.nnx.nn import dtypes
from flax.nnx.nn.attention import dot_product_attention

from normattn_jax.attention import fast as fast_lib
from normattn_jax.attention import fused as fused_lib
from normattn_jax.attention.module import (check_attention_fields, check_cache_room,
                                          check_decodable, takes_fast_path, taking_part,
                                          zero_outside)
from normattn_jax.attention.module_spec import ADDITIONS, AttentionModuleSpec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.validation import check_int

__all__ = ["MultiHeadAttention", "from_linen", "load_linen_params"]

Array = jax.Array
# The Linen module's options that change the attention around the weights; refused here.
LINEN_ONLY_OPTIONS = ADDITIONS


class MultiHeadAttention(nnx.MultiHeadAttention):
  """``flax.nnx.MultiHeadAttention`` whose weights come from any registered normalisation.

  Every argument of flax's constructor keeps its meaning (``num_heads``, ``in_features``,
  ``qkv_features``, ``out_features``, ``num_kv_heads``, ``dropout_rate``, ``decode``,
  ``normalize_qk``, ``rngs``, ...), except ``attention_fn``, which this module replaces (a
  custom one is refused). The added arguments, ``normalization``, ``implementation``,
  ``scale_logits``, ``block_size`` and ``allow_future_leak``, are the Linen
  :class:`normattn_jax.attention.MultiHeadAttention`'s fields of those names (see
  ``__init__``); its ``output_gate``, ``qk_norm`` and ``differential`` are refused here (flax's
  own ``normalize_qk`` works). A normalisation's per-head parameters are ``nnx.Param``
  attributes ``[num_heads]`` named as in the Linen params tree (NAP: ``nap_gain``,
  ``nap_bias``; HNAS: ``hybrid_weight``), initialised from the resolved options.

  ``decode=True`` (with ``init_cache``) works for the normalisations whose weights of a query
  depend on that query's logits alone (softmax, NAP, NON, sigmoid, sink, ...); it is refused for
  those that normalise over the queries too (DNAS, HNAS, Sinkhorn).
  """

  def __init__(self, num_heads: int, in_features: int, qkv_features: Optional[int] = None,
               out_features: Optional[int] = None, num_kv_heads: Optional[int] = None,
               in_kv_features: Optional[int] = None, *,
               normalization: Union[str, AttentionSpec, Mapping[str, Any]] = "softmax",
               implementation: str = "auto", scale_logits: Optional[bool] = None,
               block_size: int = fast_lib.DEFAULT_BLOCK, output_gate: Optional[str] = None,
               qk_norm: Optional[str] = None, differential: bool = False,
               allow_future_leak: bool = False, attention_fn=dot_product_attention,
               rngs: nnx.Rngs, **kwargs):
    """Check every field, then build flax's module and the normalisation's parameters.

    Args:
      num_heads: the number of heads.
      in_features: the width of ``inputs_q``.
      qkv_features: the width of the queries, keys and values (all heads); default
        ``in_features``.
      out_features: the output width; default ``in_features``.
      num_kv_heads: the number of key/value heads (grouped-query attention); default
        ``num_heads``.
      in_kv_features: the width of ``inputs_k``/``inputs_v``; default ``in_features``.
      normalization: a registered name (``attention.names()``) at its default options, or an
        ``AttentionSpec`` that sets them, e.g. ``AttentionSpec("hnas", {"hybrid_init": 0.0})``.
      implementation: "auto" | "quadratic" | "fast" | "fused", as in the Linen module: "fast"
        never forms the weights, so it takes ``is_causal`` but no dense ``mask``, no attention
        dropout, no ``sow_weights`` and no ``decode``; "fused"
        (:func:`jax.nn.dot_product_attention`, for ``attention.fusable()``) has the same
        limits, except that the row-wise normalisations also take a dense ``mask`` and so
        ``decode``; "auto" chooses as the Linen module does.
      scale_logits: divide the logits by sqrt(head_dim); None: the normalisation's choice.
      block_size: queries per block of the blockwise fast paths.
      output_gate: must be None (the Linen module's option, not supported here).
      qk_norm: must be None (idem; flax's ``normalize_qk`` is available).
      differential: must be False (idem).
      allow_future_leak: accept causal calls of a normalisation that is not causal-safe.
      attention_fn: must be flax's ``dot_product_attention`` (the default); this module
        computes the attention itself.
      rngs: the ``nnx.Rngs`` of the parameters (and of dropout, as in flax).
      **kwargs: flax's other constructor arguments (``dropout_rate``, ``decode``, ``dtype``,
        ``kernel_init``, ``use_bias``, ``normalize_qk``, ...).

    Raises:
      ValueError: naming the field and its value, before any parameter is made: an unknown
        normalisation or a refused option, an implementation, dropout rate, block size or head
        count out of range, implementation="fused" with a normalisation it cannot fuse, a
        Linen-only option set, a custom ``attention_fn``, or ``decode=True`` with a
        normalisation that normalises over the queries.
    """
    check_int("num_heads", num_heads)
    spec = AttentionSpec.of(normalization)
    check_attention_fields(normalization=spec, dropout_rate=kwargs.get("dropout_rate", 0.0),
                           implementation=implementation, output_gate=output_gate,
                           qk_norm=qk_norm, differential=differential)
    options = AttentionModuleSpec(implementation, output_gate, qk_norm, differential)
    for name, value in options.added().items():
      if name in LINEN_ONLY_OPTIONS:
        hint = "; flax's normalize_qk=True is available" if name == "qk_norm" else ""
        raise ValueError(f"{name}={value!r} is an option of the Linen "
                         f"normattn_jax.MultiHeadAttention only; the NNX module does not "
                         f"support it{hint}")
    if attention_fn is not dot_product_attention:
      raise ValueError(f"attention_fn={attention_fn!r}: this module computes the attention from "
                       f"normalization=; use flax.nnx.MultiHeadAttention for a custom one")
    if scale_logits not in (None, True, False):
      raise ValueError(f"scale_logits must be None, True or False, got {scale_logits!r}")
    check_int("block_size", block_size)
    if not isinstance(allow_future_leak, bool):
      raise ValueError(f"allow_future_leak must be True or False, got {allow_future_leak!r}")
    if kwargs.get("decode"):
      check_decodable(spec)
    super().__init__(num_heads, in_features, qkv_features, out_features, num_kv_heads,
                     in_kv_features, rngs=rngs, **kwargs)
    # flax's __call__ calls self.attention_fn: drop the instance attribute so that the method
    # below answers (it reads this module's per-head parameters).
    del self.attention_fn
    self.normalization = spec
    self.implementation = implementation
    self.scale_logits = scale_logits
    self.block_size = block_size
    self.allow_future_leak = allow_future_leak
    norm, options = spec.normalization, spec.resolved()
    for param in norm.params:
      if hasattr(self, param.name):
        raise ValueError(f"normalization {spec.name!r}: its per-head parameter {param.name!r} "
                         f"clashes with an attribute of flax's MultiHeadAttention")
      init = param.init(options)
      setattr(self, param.name, nnx.Param(init(rngs.params(), (num_heads,), self.param_dtype)))

  def __call__(self, inputs_q: Array, inputs_k: Optional[Array] = None,
               inputs_v: Optional[Array] = None, *, mask: Optional[Array] = None,
               deterministic: Optional[bool] = None, rngs=None, sow_weights: bool = False,
               decode: Optional[bool] = None, is_causal: bool = False, out_sharding=None,
               qkv_sharding=None) -> Array:
    """flax's ``MultiHeadAttention.__call__``, with this module's normalisation.

    Args:
      inputs_q: queries' inputs ``[batch..., q, in_features]``.
      inputs_k: keys' inputs ``[batch..., k, in_kv_features]``; default ``inputs_q``.
      inputs_v: values' inputs; default ``inputs_k``.
      mask: boolean (or 0/1) mask broadcastable to ``[batch..., num_heads, q, k]``, True =
        attend; or None.
      deterministic: no attention dropout (overrides the constructor's).
      rngs: the dropout ``nnx.Rngs`` or stream (overrides the module's).
      sow_weights: store the weights in the ``nnx.Intermediate`` "attention_weights".
      decode: use the key/value cache (``init_cache`` first), one position per call.
      is_causal: add flax's causal mask (query i sees the keys j <= i).
      out_sharding: the output projection's sharding, as in flax.
      qkv_sharding: the query/key/value projections' sharding, as in flax.

    Returns:
      The output ``[batch..., q, out_features]``.

    Raises:
      ValueError: flax's errors, ``decode`` with a normalisation that normalises over the
        queries or with implementation="fast", and a causal call (``is_causal``, or a concrete
        causal ``mask``) of a normalisation that is not causal-safe, unless the module was made
        with ``allow_future_leak=True``.
    """
    self.normalization.normalization.check_causal(
        causal=is_causal, mask=mask, allow_future_leak=self.allow_future_leak,
        name=str(self.normalization))
    room = None
    decoding = decode or (decode is None and self.decode)
    flax_refuses = inputs_k is None and inputs_v is not None  # flax's error, raised below
    if mask is not None and not decoding and not flax_refuses:  # padding's NaN or inf: no harm
      queries, keys = taking_part(jnp.asarray(mask) != 0, None, None, inputs_q.ndim - 2)
      inputs_k = inputs_q if inputs_k is None else inputs_k
      inputs_v = inputs_k if inputs_v is None else inputs_v
      inputs_q, inputs_k, inputs_v = (zero_outside(inputs_q, queries),
                                      zero_outside(inputs_k, keys), zero_outside(inputs_v, keys))
    if decoding:
      check_decodable(self.normalization)
      if self.implementation == "fast":
        raise ValueError("implementation='fast' cannot decode: the cache adds a dense mask of "
                         "the keys seen so far; use implementation='auto' or 'quadratic'")
      if self.cache_index is not None and self.cached_key is not None:
        room = check_cache_room(self.cache_index[...], self.cached_key.shape[-3])
    out = super().__call__(inputs_q, inputs_k, inputs_v, mask=mask, deterministic=deterministic,
                           rngs=rngs, sow_weights=sow_weights, decode=decode,
                           is_causal=is_causal, out_sharding=out_sharding,
                           qkv_sharding=qkv_sharding)
    return out if room is None else out * room.astype(out.dtype)

  def init_cache(self, input_shape, dtype=jnp.float32) -> None:
    """flax's ``init_cache``, refused for a normalisation that cannot decode.

    Args:
      input_shape: the shape of the full inputs ``[batch..., max_length, features]``.
      dtype: the cache's dtype.

    Raises:
      ValueError: for a normalisation that normalises over the queries (DNAS, HNAS, Sinkhorn).
    """
    check_decodable(self.normalization)
    super().init_cache(input_shape, dtype)

  def head_params(self) -> dict:
    """The normalisation's per-head parameters.

    Returns:
      ``{name: array [num_heads]}``, empty for a normalisation without any.
    """
    return {p.name: getattr(self, p.name)[...] for p in self.normalization.normalization.params}

  def attention_fn(self, query: Array, key: Array, value: Array, *, mask=None,
                   dropout_rng=None, dropout_rate: float = 0.0, broadcast_dropout: bool = True,
                   deterministic: bool = False, dtype=None, precision=None, module=None,
                   is_causal: bool = False) -> Array:
    """The attention flax's ``__call__`` runs between the projections (its ``attention_fn``
    arguments): the logits, the normalisation's weights, dropout as flax's, the weighted sum.

    Args:
      query: ``[batch..., q, num_heads, head_dim]``.
      key: ``[batch..., k, num_kv_heads, head_dim]``.
      value: ``[batch..., k, num_kv_heads, head_dim]``.
      mask: broadcastable to ``[batch..., num_heads, q, k]``, nonzero = attend; or None.
      dropout_rng: the key of the dropout mask, or None.
      dropout_rate: the attention dropout rate.
      broadcast_dropout: one dropout mask shared by the batch and the heads.
      deterministic: no dropout.
      dtype: the computation's dtype (None: promoted from the inputs).
      precision: the einsums' precision.
      module: the module to sow the weights into, or None.
      is_causal: add flax's causal mask (query i sees the keys j <= i).

    Returns:
      The heads' outputs ``[batch..., q, num_heads, head_dim]``.
    """
    query, key, value = dtypes.promote_dtype((query, key, value), dtype=dtype)
    dtype = query.dtype
    if key.shape[-2] != query.shape[-2]:  # grouped-query attention: each kv head serves a group
      repeat = query.shape[-2] // key.shape[-2]
      key, value = jnp.repeat(key, repeat, axis=-2), jnp.repeat(value, repeat, axis=-2)
    spec = self.normalization
    norm, options, params = spec.normalization, spec.resolved(), self.head_params()
    scale = self.scale_logits if self.scale_logits is not None else norm.scale_logits
    if scale:
      query = query / jnp.sqrt(query.shape[-1]).astype(dtype)
    n_q, n_k = query.shape[-3], key.shape[-3]
    dropout_active = not deterministic and dropout_rate > 0.0
    blockers = [name for name, present in (
        ("a dense mask", mask is not None), ("sow_weights", module is not None),
        ("attention dropout", dropout_active),
        ("is_causal with queries and keys of different lengths", is_causal and n_q != n_k))
        if present]
    num_logits = int(jnp.size(query) // query.shape[-1]) * n_k
    fused_blockers = fused_lib.blockers(norm, dense_mask=mask is not None,
                                        sow_weights=module is not None, dropout=dropout_active)
    if is_causal and n_q != n_k:  # flax aligns them at the start, the fused path at the end
      fused_blockers.append("is_causal with queries and keys of different lengths")
    if fused_lib.takes_fused_path(norm, self.implementation, fused_blockers, dtype,
                                  query.shape[-1], num_keys=n_k, value_dim=value.shape[-1],
                                  dense_mask=mask is not None, structured="is_causal"):
      out = norm.fused_attention(query, key, value, params, options,
                                 mask=None if mask is None else jnp.asarray(mask).astype(bool),
                                 causal=is_causal, block_size=self.block_size,
                                 allow_future_leak=self.allow_future_leak)
      return out.astype(dtype)
    if takes_fast_path(spec, self.implementation, blockers, n_q, n_k, query.shape[-1],
                       is_causal, num_logits, structured="is_causal"):
      to_heads = lambda x: jnp.swapaxes(x, -2, -3)  # [..., n, h, d] <-> [..., h, n, d]
      out = norm.fast_attention(to_heads(query), to_heads(key), to_heads(value), params, options,
                                causal=is_causal, block_size=self.block_size,
                                allow_future_leak=self.allow_future_leak)
      return to_heads(out).astype(dtype)

    if mask is not None:
      mask = jnp.asarray(mask).astype(jnp.bool_)
    if is_causal:  # flax's causal mask: aligned at the start
      causal = jnp.tril(jnp.ones((n_q, n_k), jnp.bool_))
      mask = causal if mask is None else mask & causal
    logits = jnp.einsum("...qhd,...khd->...hqk", query, key, precision=precision)
    weights = norm.attention_weights(logits, mask, params, options).astype(dtype)
    if module is not None:
      module.sow(nnx.Intermediate, "attention_weights", weights)
    if dropout_active:  # as flax's dot_product_attention_weights
      keep_prob = 1.0 - dropout_rate
      shape = weights.shape
      if broadcast_dropout:
        shape = (1,) * (weights.ndim - 2) + weights.shape[-2:]
      keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
      weights = weights * (keep.astype(dtype) / jnp.asarray(keep_prob, dtype=dtype))
    return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)


def load_linen_params(module: MultiHeadAttention, params: Mapping[str, Any]) -> None:
  """Copy a Linen ``normattn_jax.MultiHeadAttention``'s parameters into the NNX module.

  Args:
    module: the NNX module, of the same normalisation, head count and widths.
    params: the Linen module's ``params`` collection (``variables["params"]``), without the
      Linen-only options' parameters.

  Raises:
    ValueError: for a parameter the NNX module does not have, one it misses, or a shape that
      differs.
  """
  targets = {}
  for name in ("query", "key", "value", "out"):
    layer = getattr(module, name)
    targets[(name, "kernel")] = layer.kernel
    if layer.bias is not None:
      targets[(name, "bias")] = layer.bias
  for name in module.normalization.normalization.param_names:
    targets[(name,)] = getattr(module, name)
  given = {path: leaf for path, leaf in _flatten(params)}
  if set(given) != set(targets):
    raise ValueError(f"params hold {sorted(map('/'.join, set(given) - set(targets)))} the NNX "
                     f"module does not have and miss "
                     f"{sorted(map('/'.join, set(targets) - set(given)))}")
  for path, variable in targets.items():
    if jnp.shape(given[path]) != variable.shape:
      raise ValueError(f"param {'/'.join(path)} has shape {jnp.shape(given[path])}, the NNX "
                       f"module's {variable.shape}")
  for path, variable in targets.items():
    variable[...] = jnp.asarray(given[path], variable.dtype)


def _flatten(tree, prefix=()):
  for name, value in tree.items():
    if isinstance(value, Mapping):
      yield from _flatten(value, prefix + (name,))
    else:
      yield prefix + (name,), value


def from_linen(module: linen.Module, *example_inputs: Any, rngs: nnx.Rngs,
               **call_kwargs: Any) -> nnx.Module:
  """One of the library's Linen modules (a ``TransformerBlock``, a ``SequenceModel`` of any of
  the six architectures, ``BertModel``, ``AlbertModel``, ``CausalLM``) as an NNX module, through
  flax's Linen-to-NNX bridge: its parameters are initialised from ``rngs`` on
  ``example_inputs``, its state tree is the Linen module's (``nnx.state(m, nnx.Param)`` is its
  ``params``), and it is called as the Linen module is. The blocks and models are written once,
  in Linen, so every normalisation and module option works in them.

  Args:
    module: the Linen module.
    *example_inputs: inputs of the shapes it will be called with (e.g. tokens ``[batch, N]``).
    rngs: the NNX random streams (``params``; ``dropout`` for training with dropout).
    **call_kwargs: keyword arguments of the initialising call (e.g. ``mask``).

  Returns:
    The NNX module, initialised.
  """
  return bridge.lazy_init(bridge.ToNNX(module, rngs=rngs), *example_inputs, **call_kwargs)
