"""Dropout whose rate may be traced: one rate per model of a grid, so that a sweep over the
dropout rate is data of one compiled program (like the learning rate), not a program per rate.

``flax.linen.Dropout`` reads its rate as a number (a rate of 0 draws nothing). A traced rate
always draws, with flax's masks and scaling: where 1 - rate is a float32 number (1/16, 1/4, ...)
the same forward bits as the number; a gradient summed over dropped values may round apart, as
XLA moves a number's scale past a sum and not a traced one's. A traced rate of 0 keeps every
value (its mask all ones, ``x / 1``), and is checked where it was given (a config's field).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def is_traced(rate) -> bool:
  """Whether ``rate`` is a traced value (e.g. each model's own under ``vmap``), not a number."""
  return isinstance(rate, jax.core.Tracer)


def draws(rate) -> bool:
  """Whether dropout at ``rate`` draws masks (where it is not deterministic): a rate that is
  traced or above 0."""
  return is_traced(rate) or rate > 0.0


def check_rate(rate, field: str = "dropout_rate") -> None:
  """Refuse a number outside [0, 1) (a traced rate is its config's to check).

  Raises:
    ValueError: naming ``field`` and the rate.
  """
  if not is_traced(rate) and not 0.0 <= rate < 1.0:
    raise ValueError(f"{field} must lie in [0, 1), got {rate!r}")


def divided(values, keep_prob, dtype):
  """``values / keep_prob`` as ``dtype``. XLA turns a division by a number into the product
  with its reciprocal; a traced ``keep_prob`` is written as that product, so that a rate traced
  and the same rate as a number scale alike."""
  if is_traced(keep_prob):
    return values.astype(dtype) * (1 / keep_prob).astype(dtype)
  return (values / keep_prob).astype(dtype)


class Dropout(nn.Dropout):
  """``flax.linen.Dropout`` whose rate may be traced (``draws``). The class keeps flax's name,
  so a module's automatic names, and with them its dropout keys, are those of flax's."""

  @nn.compact
  def __call__(self, inputs, deterministic: bool | None = None, rng=None):
    if not is_traced(self.rate):
      return super().__call__(inputs, deterministic, rng)
    if nn.merge_param("deterministic", self.deterministic, deterministic):
      return inputs
    keep_prob = 1.0 - self.rate
    if rng is None:
      rng = self.make_rng(self.rng_collection)
    shape = [1 if dim in self.broadcast_dims else size for dim, size in enumerate(inputs.shape)]
    mask = jnp.broadcast_to(jax.random.bernoulli(rng, p=keep_prob, shape=shape), inputs.shape)
    return jax.lax.select(mask, divided(inputs, keep_prob, inputs.dtype), jnp.zeros_like(inputs))
