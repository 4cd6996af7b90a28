"""How a block computes its feed-forward sub-block: XLA's ops (flax's ``Dense`` and the
project's ``LayerNorm``) or the Pallas kernels of ``kernels.ffn``, with the same parameters.

``ffn_implementation`` (a ``TransformerBlock``'s and ``SequenceModel``'s field, a sweep's
``model.ffn_implementation``) is one of ``FFN_IMPLEMENTATIONS``:

* "xla" (the default): XLA's ops, the hidden layer written to memory;
* "pallas": the kernels everywhere (interpreted on a CPU, so only for checks there); they take no
  dropout, which would have to be drawn inside them;
* "auto": the kernels where ``kernels.rules`` holds a measurement on this kind of device at this
  layout, dtype and width that found them faster, and no dropout is active; XLA's ops elsewhere.
"""
from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from normattn_jax.dropout import draws
from normattn_jax.kernels import ffn as ffn_kernels
from normattn_jax.kernels import rules

Array = jax.Array
FFN_IMPLEMENTATIONS = ("xla", "pallas", "auto")


def check_ffn_implementation(implementation, dropout_rate: float,
                             field: str = "ffn_implementation",
                             dropout_field: str = "dropout_rate") -> None:
  """Refuse an unknown implementation, and "pallas" with dropout.

  Args:
    implementation: the value to check.
    dropout_rate: the block's dropout rate.
    field: the name the message gives the implementation (e.g. a config field).
    dropout_field: the name it gives the dropout rate.

  Raises:
    ValueError: naming the field and its value.
  """
  if implementation not in FFN_IMPLEMENTATIONS:
    raise ValueError(f"{field}={implementation!r}: must be one of {FFN_IMPLEMENTATIONS}")
  if implementation == "pallas" and draws(dropout_rate):
    raise ValueError(f"{field}='pallas' computes the feed-forward sub-block in one kernel, "
                     f"which draws no dropout: needs {dropout_field}=0, got {dropout_rate!r} "
                     f"(use 'xla' or 'auto')")


def takes_kernel(implementation: str, layout: str, dtype, d_model: int, ffn_features: int,
                 dropout_active: bool) -> bool:
  """Whether a call runs the kernels (see the module docstring).

  Args:
    implementation: one of ``FFN_IMPLEMENTATIONS``.
    layout: "mte" or "bert".
    dtype: the compute dtype.
    d_model: the block's width.
    ffn_features: the hidden width.
    dropout_active: dropout is drawn in this call.

  Returns:
    True for the kernels.
  """
  if implementation == "xla" or dropout_active:
    return False
  if implementation == "pallas":
    return True
  return bool(rules.faster("ffn", layout=layout, dtype=jnp.dtype(dtype).name, d_model=d_model,
                           ffn_features=ffn_features))


class DenseParams(nn.Module):
  """The parameters of a ``flax.linen.Dense`` (``kernel`` then ``bias``, same initialisers,
  names and random keys) without applying it."""
  features: int
  kernel_init: Callable
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, in_features: int) -> tuple:
    kernel = self.param("kernel", self.kernel_init, (in_features, self.features),
                        self.param_dtype)
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), self.param_dtype)
    return kernel, bias


class NormParams(nn.Module):
  """The parameters of a ``norms.LayerNorm`` (``scale``, ``bias``) without applying it."""
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, features: int) -> tuple:
    return (self.param("scale", nn.initializers.ones, (features,), self.param_dtype),
            self.param("bias", nn.initializers.zeros, (features,), self.param_dtype))


def kernel_sub_block(p: Array, layout: str, ffn_features: int, *, epsilon: float,
                     kernel_init: Callable, dtype, param_dtype) -> Array:
  """The feed-forward sub-block of ``layout`` on ``p [..., d]`` by the kernels, its parameters
  made under the XLA path's names (``ffn_in``, ``ffn_hidden_norm`` for MTE, ``ffn_out``,
  ``ffn_norm``) in the calling module, so the two paths share one parameter tree.

  Args:
    p: the sub-block's input.
    layout: "mte" or "bert".
    ffn_features: the hidden width.
    epsilon: the LayerNorms' epsilon.
    kernel_init: the dense layers' initialiser.
    dtype: the compute dtype, or None for the promotion of ``p``'s and the parameters' (as
      flax's ``Dense`` computes).
    param_dtype: the parameters' dtype.

  Returns:
    The sub-block's output ``[..., d]``.
  """
  d_model = p.shape[-1]
  compute = jnp.dtype(dtype) if dtype is not None else jnp.promote_types(p.dtype, param_dtype)
  w1, b1 = DenseParams(ffn_features, kernel_init, param_dtype, name="ffn_in")(d_model)
  if layout == "mte":
    hidden_scale, hidden_bias = NormParams(param_dtype, name="ffn_hidden_norm")(ffn_features)
  else:
    hidden_scale, hidden_bias = jnp.ones((ffn_features,)), jnp.zeros((ffn_features,))
  w2, b2 = DenseParams(d_model, kernel_init, param_dtype, name="ffn_out")(ffn_features)
  out_scale, out_bias = NormParams(param_dtype, name="ffn_norm")(d_model)
  row = lambda v: v.astype(compute).reshape(1, -1)
  params = ffn_kernels.Params(w1.astype(compute), row(b1), row(hidden_scale), row(hidden_bias),
                              w2.astype(compute), row(b2), row(out_scale), row(out_bias))
  out = ffn_kernels.feed_forward(p.astype(compute), params, layout=layout, epsilon=epsilon)
  return out.astype(jnp.promote_types(p.dtype, compute))
