"""The six architectures of the NAP paper as one ``TransformerBlock`` with named presets.

Two layouts (Richter & Wattenhofer, Section 4 and Appendix C/D):

BERT (post-LN, ``normalize=False``)::

    p  = LN(x + Mix(A V))                      attention sub-module
    x' = LN(p + W2 GELU(W1 p + b1) + b2)        feed-forward sub-module

MTE (``normalize=True``; also NAP, NON, sum, max)::

    h  = Mix(GELU(LN(concat_heads(A V))))      the hidden LayerNorm and GELU of the sub-module
    p  = x + LN(h)
    x' = p + LN(W2 GELU(LN(W1 p + b1)) + b2)    the residual stream itself is never normalised

NON replaces the hidden LayerNorm by its 1/sqrt(N) (inside ``non_weights``); sum and max
replace the attention sub-module by a parameter-free sum-/max-reduce over the valid positions,
broadcast back, with a wider feed-forward (so the parameter counts match). Table 1's ablation
steps (BERT -> +normalize -> +GELU = MTE) are the switches ``normalize`` and ``attention_gelu``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from normattn_jax.attention.module import MultiHeadAttention, check_attention_fields
from normattn_jax.attention.module_spec import AttentionModuleSpec, check_module_spec
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.dropout import Dropout, check_rate, draws
from normattn_jax.feedforward import check_ffn_implementation, kernel_sub_block, takes_kernel
from normattn_jax.norms import LayerNorm
from normattn_jax.validation import check_int

__all__ = ["ARCHITECTURES", "Architecture", "TransformerBlock", "resolve_architecture"]

Array = jax.Array


def _gelu(x: Array) -> Array:
  """BERT's tanh approximation of GELU, as in the NAP paper's code."""
  return jax.nn.gelu(x, approximate=True)


@dataclasses.dataclass(frozen=True)
class Architecture:
  """What distinguishes one architecture of the paper from another."""
  mixer: str                    # "attention" | "sum" | "max"
  normalization: Union[str, AttentionSpec, None]  # the attention weights (None for pooling)
  normalize: bool               # MTE layout (True) or BERT post-LN layout (False)
  attention_gelu: bool          # GELU after the hidden LayerNorm of the attention sub-module


#: The paper's architectures by name (``TransformerBlock``'s ``arch``).
ARCHITECTURES = {
    "bert": Architecture("attention", "softmax", normalize=False, attention_gelu=False),
    "mte": Architecture("attention", "softmax", normalize=True, attention_gelu=True),
    "nap": Architecture("attention", "nap", normalize=True, attention_gelu=True),
    "non": Architecture("attention", "non", normalize=True, attention_gelu=True),
    "sum": Architecture("sum", None, normalize=True, attention_gelu=False),
    "max": Architecture("max", None, normalize=True, attention_gelu=False),
}


def resolve_architecture(arch: str, normalization: Union[str, AttentionSpec, None] = None,
                         normalize: Optional[bool] = None,
                         attention_gelu: Optional[bool] = None) -> Architecture:
  """The preset ``arch`` with any of its fields overridden (None keeps the preset's).

  Args:
    arch: a key of ``ARCHITECTURES``.
    normalization: a registered attention normalisation (a name or an ``AttentionSpec``), for
      attention archs only; or None.
    normalize: the MTE layout (True) or the BERT post-LN layout (False); or None.
    attention_gelu: GELU after the attention sub-module's hidden LayerNorm; or None.

  Returns:
    The resolved ``Architecture``.

  Raises:
    ValueError: if ``arch`` is unknown, or ``normalization`` is given for a pooling arch.
  """
  if arch not in ARCHITECTURES:
    raise ValueError(f"arch must be one of {tuple(ARCHITECTURES)}, got {arch!r}")
  spec = ARCHITECTURES[arch]
  if normalization is not None:
    if spec.mixer != "attention":
      raise ValueError(f"normalization={normalization!r} needs an attention arch, "
                       f"but arch={arch!r} pools without attention")
    spec = dataclasses.replace(spec, normalization=normalization)
  if normalize is not None:
    spec = dataclasses.replace(spec, normalize=bool(normalize))
  if attention_gelu is not None:
    spec = dataclasses.replace(spec, attention_gelu=bool(attention_gelu))
  return spec


def default_ffn_features(d_model: int, mixer: str) -> int:
  """4d for attention; for pooling, round((12d + 8) / (2d + 1) * d) ~ 6d so that the parameter
  counts match the attention models (8 -> 49, 128 -> 769), as in the paper's code.

  Args:
    d_model: the model width.
    mixer: "attention", "sum" or "max".

  Returns:
    The feed-forward hidden width.
  """
  if mixer == "attention":
    return 4 * d_model
  return int(round((12.0 * d_model + 8) / (2 * d_model + 1) * d_model))


def pool(x: Array, mixer: str, mask: Optional[Array]) -> Array:
  """Sum- or max-reduce over the valid positions of ``x [..., N, d]``, broadcast back to N.

  Args:
    x: the inputs, shape ``[..., N, d]``.
    mixer: "sum" sums; any other value takes the maximum.
    mask: boolean ``[..., N]``, True = valid position; None: all valid.

  Returns:
    The pooled vector broadcast to ``x``'s shape (0 for max-pooling with no valid position).
  """
  if mixer == "sum":
    if mask is not None:
      x = jnp.where(mask[..., None], x, 0)
    pooled = jnp.sum(x, axis=-2, keepdims=True)
  else:
    if mask is not None:
      x = jnp.where(mask[..., None], x, -jnp.inf)
    pooled = jnp.max(x, axis=-2, keepdims=True)
    pooled = jnp.where(jnp.isfinite(pooled), pooled, 0)  # no valid position at all
  return jnp.broadcast_to(pooled, x.shape)


def check_layer_fields(module, d_model: Optional[int] = None) -> Architecture:
  """Validate the fields a block and a model share; returns the resolved architecture.

  Args:
    module: a ``TransformerBlock`` or model with its fields (``arch``, ``num_heads``, ...).
    d_model: the model width, checked to be divisible by ``num_heads``; None skips that check.

  Returns:
    The resolved ``Architecture``.

  Raises:
    ValueError: naming the first field out of range.
  """
  spec = resolve_architecture(module.arch, module.normalization, module.normalize,
                              module.attention_gelu)
  check_block_fields(num_heads=module.num_heads, ffn_features=module.ffn_features,
                     dropout_rate=module.dropout_rate,
                     layer_norm_epsilon=module.layer_norm_epsilon)
  check_ffn_implementation(module.ffn_implementation, module.dropout_rate)
  attention = module.attention_module
  check_module_spec(attention)
  if spec.mixer == "attention":
    if d_model is not None and d_model % module.num_heads:
      raise ValueError(f"num_heads ({module.num_heads}) must divide d_model ({d_model})")
    check_attention_fields(
        normalization=spec.normalization, dropout_rate=module.dropout_rate,
        head_dim=None if d_model is None else d_model // module.num_heads,
        **attention.module_kwargs())
  else:
    for name, value in attention.added().items():
      if value not in (None, False):
        raise ValueError(f"{name}={value!r} needs an attention arch, but arch={module.arch!r} "
                         f"pools without attention")
  return spec


def check_block_fields(*, num_heads: int, ffn_features: Optional[int], dropout_rate: float,
                       layer_norm_epsilon: float) -> None:
  """Refuse block fields out of range.

  Args:
    num_heads: must be a positive integer.
    ffn_features: must be a positive integer, or None.
    dropout_rate: must lie in [0, 1); a traced rate passes (``normattn_jax.dropout``).
    layer_norm_epsilon: must be > 0.

  Raises:
    ValueError: naming the first field out of range.
  """
  check_int("num_heads", num_heads)
  if ffn_features is not None:
    check_int("ffn_features", ffn_features)
  check_rate(dropout_rate)
  if not layer_norm_epsilon > 0:
    raise ValueError(f"layer_norm_epsilon must be > 0, got {layer_norm_epsilon!r}")


class TransformerBlock(nn.Module):
  """One layer of any of the paper's architectures, ``x [..., N, d] -> [..., N, d]``.

  ``arch`` picks the preset; ``normalization`` puts any attention normalisation (e.g. "dnas",
  "hnas", or ``AttentionSpec("sinkhorn", {"sinkhorn_iters": 5})``) on an attention arch's
  layout; ``normalize`` and ``attention_gelu`` are the ablation switches of Table 1. LayerNorms
  follow Keras (epsilon 1e-3, gain and bias). ``attention_module`` carries
  ``MultiHeadAttention``'s own options (its implementation; ``output_gate``, ``qk_norm`` and
  ``differential`` for attention archs only, off by default, adding no parameter); the output
  gate multiplies the attention output before the MTE layout's hidden LayerNorm and
  GELU. ``layer_index`` is the block's depth from 1 (differential attention's lambda_init).
  ``ffn_implementation`` computes the feed-forward sub-block with XLA's ops ("xla"), the Pallas
  kernels ("pallas") or the kernels where measured faster ("auto"; ``normattn_jax.feedforward``).
  """
  num_heads: int = 4
  arch: str = "mte"
  normalization: Union[str, AttentionSpec, None] = None
  normalize: Optional[bool] = None
  attention_gelu: Optional[bool] = None
  ffn_features: Optional[int] = None
  dropout_rate: float = 0.0
  layer_norm_epsilon: float = 1e-3
  kernel_init: Callable = nn.initializers.truncated_normal(0.02)
  attention_module: AttentionModuleSpec = AttentionModuleSpec()
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  layer_index: int = 1
  ffn_implementation: str = "xla"

  def __post_init__(self):
    check_layer_fields(self)
    check_int("layer_index", self.layer_index)
    super().__post_init__()

  @property
  def spec(self) -> Architecture:
    """The resolved ``Architecture`` of the block's fields.

    Returns:
      ``resolve_architecture(arch, normalization, normalize, attention_gelu)``.
    """
    return resolve_architecture(self.arch, self.normalization, self.normalize,
                                self.attention_gelu)

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, deterministic: bool = True,
               sow_weights: bool = False, first_only: bool = False) -> Array:
    """``mask [..., N]`` marks valid (True) and padding (False) positions: the attention's
    ``padding_mask`` (padded queries and keys both masked) or the positions the pooling skips,
    so padding never changes the valid outputs; ``sow_weights`` stores the attention weights in
    the 'intermediates' collection.

    ``first_only`` computes the output at token 0 alone (``[..., 1, d]``), all a head that
    reads token 0 needs: the attention's one query is token 0, its keys and values every token
    (a normalisation over the queries, DNAS, HNAS or Sinkhorn, attends from every query and
    keeps token 0's row, which depends on the others), pooling pools every token, and the
    residuals and the feed-forward run on token 0. Token 0 of the full call, to float rounding;
    with dropout the masks are drawn for the positions computed."""
    spec = self.spec
    d_model = x.shape[-1]
    norm = lambda name: LayerNorm(epsilon=self.layer_norm_epsilon, param_dtype=self.param_dtype,
                                  name=name)
    dense = lambda features, name: nn.Dense(features, kernel_init=self.kernel_init,
                                            dtype=self.dtype, param_dtype=self.param_dtype,
                                            name=name)
    dropout = lambda y: Dropout(self.dropout_rate)(y, deterministic=deterministic)

    if spec.mixer == "attention":
      if d_model % self.num_heads:
        raise ValueError(f"num_heads ({self.num_heads}) must divide d_model ({d_model})")
      weights = AttentionSpec.of(spec.normalization).normalization
      attention = MultiHeadAttention(
          num_heads=self.num_heads, normalization=spec.normalization,
          kernel_init=self.kernel_init, dropout_rate=self.dropout_rate,
          broadcast_dropout=False,  # a mask per example and head, as Keras' Dropout in the NAP code
          head_norm=spec.normalize and weights.head_norm,
          head_norm_epsilon=self.layer_norm_epsilon,
          head_activation=_gelu if spec.attention_gelu else None,
          dtype=self.dtype, param_dtype=self.param_dtype, name="attention",
          layer_index=self.layer_index, **self.attention_module.module_kwargs())
      if first_only and not weights.normalizes_over_queries:
        h = attention(x[..., :1, :], x, query_mask=None if mask is None else mask[..., :1],
                      key_mask=mask, deterministic=deterministic, sow_weights=sow_weights)
      else:
        h = attention(x, padding_mask=mask, deterministic=deterministic, sow_weights=sow_weights)
    else:
      h = pool(x, spec.mixer, mask)
    if first_only:
      x, h = x[..., :1, :], h[..., :1, :]

    ffn_features = self.ffn_features or default_ffn_features(d_model, spec.mixer)
    layout = "mte" if spec.normalize else "bert"
    compute = self.dtype if self.dtype is not None else jnp.promote_types(x.dtype,
                                                                          self.param_dtype)
    kernel = takes_kernel(self.ffn_implementation, layout, compute, d_model, ffn_features,
                          draws(self.dropout_rate) and not deterministic)
    fused = lambda p: kernel_sub_block(p, layout, ffn_features, epsilon=self.layer_norm_epsilon,
                                       kernel_init=self.kernel_init, dtype=self.dtype,
                                       param_dtype=self.param_dtype)
    if spec.normalize:
      p = x + dropout(norm("attention_norm")(h))
      if kernel:
        return fused(p)
      f = _gelu(norm("ffn_hidden_norm")(dense(ffn_features, "ffn_in")(p)))
      f = dense(d_model, "ffn_out")(f)
      return p + dropout(norm("ffn_norm")(f))
    p = norm("attention_norm")(x + dropout(h))
    if kernel:
      return fused(p)
    f = dense(d_model, "ffn_out")(_gelu(dense(ffn_features, "ffn_in")(p)))
    return norm("ffn_norm")(p + dropout(f))
