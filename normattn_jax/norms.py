"""LayerNorm and the variants of Brody et al. (LayerNorm = projection + scaling).

``standard``       (x - mean) / sqrt(var + eps)            projection onto 1^perp, then scaling
``no_projection``  x / sqrt(mean(x^2) + eps)               scaling only (no mean subtraction)
``no_scaling``     x - mean                                projection only
``none``           x                                       identity

Each kind is followed by the optional per-feature gain ``scale`` and ``bias`` (flax's names, so
``kind="standard"`` has exactly the parameters of ``flax.linen.LayerNorm``).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["LAYER_NORM_KINDS", "LayerNorm", "normalize"]

#: The LayerNorm variants of Brody et al.: both parts, projection only, scaling only, none.
LAYER_NORM_KINDS = ("standard", "no_projection", "no_scaling", "none")


def check_layer_norm_kind(kind: str, field: str = "kind") -> str:
  """Refuse a LayerNorm kind not in ``LAYER_NORM_KINDS``.

  Args:
    kind: the kind to check.
    field: the name the error gives the value (e.g. the config field).

  Returns:
    ``kind``, unchanged.

  Raises:
    ValueError: if ``kind`` is not one of ``LAYER_NORM_KINDS``.
  """
  if kind not in LAYER_NORM_KINDS:
    raise ValueError(f"{field} must be one of {LAYER_NORM_KINDS}, got {kind!r}")
  return kind


def normalize(x: jax.Array, kind: str = "standard", epsilon: float = 1e-6) -> jax.Array:
  """The parameter-free part of a LayerNorm variant over the last axis (float32 inside).

  Args:
    x: floating-point array ``[..., features]``.
    kind: one of ``LAYER_NORM_KINDS``.
    epsilon: added to the mean square under the square root (for "standard", "no_projection").

  Returns:
    The normalised ``x``, of its shape and dtype.

  Raises:
    ValueError: if ``kind`` is not one of ``LAYER_NORM_KINDS``.
  """
  check_layer_norm_kind(kind)
  dtype = x.dtype
  x = x.astype(jnp.promote_types(dtype, jnp.float32))
  if kind in ("standard", "no_scaling"):
    x = x - jnp.mean(x, axis=-1, keepdims=True)
  if kind in ("standard", "no_projection"):
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + epsilon)
  return x.astype(dtype)


class LayerNorm(nn.Module):
  """A LayerNorm variant with per-feature ``scale`` and ``bias``."""
  kind: str = "standard"
  epsilon: float = 1e-6
  use_scale: bool = True
  use_bias: bool = True
  param_dtype: jnp.dtype = jnp.float32

  def __post_init__(self):
    check_layer_norm_kind(self.kind)
    if not self.epsilon >= 0:
      raise ValueError(f"epsilon must be >= 0, got {self.epsilon!r}")
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    y = normalize(x, self.kind, self.epsilon)
    features = x.shape[-1]
    if self.use_scale:
      scale = self.param("scale", nn.initializers.ones, (features,), self.param_dtype)
      y = y * scale.astype(y.dtype)
    if self.use_bias:
      bias = self.param("bias", nn.initializers.zeros, (features,), self.param_dtype)
      y = y + bias.astype(y.dtype)
    return y
