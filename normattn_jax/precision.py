"""The mixed-precision policy of every run: parameters in float32, compute in the config's
dtype, and the attention weights' reductions in float32 whatever the compute dtype.

A config names its compute dtype by string (a sweep's ``model.dtype``, pre-training's
``model.dtype``): "float32", or "bfloat16" for accelerators, where bf16 matmuls run at several
times float32's rate. The parameters and the optimiser state stay float32 (flax's
``param_dtype``): an update of 1e-4 of a weight of 1 is lost entirely in bf16's 8 bits. The
projections, the feed-forward layers and the attention's two matmuls (logits, weighted sum)
run in the compute dtype; the weight functions (``attention.weights``), the blockwise paths
(``attention.fast``) and the fused path's offsets (``attention.fused``) promote the logits to
float32 before any exponential, log-sum-exp, column or row sum, and cast the weights back; the
LayerNorms' statistics and the loss are float32 too. ``BF16_TOLERANCES`` states how far a bf16
model's outputs may lie from the same model's in float32 (tests/test_precision.py checks every
normalisation on every implementation against them). A sweep's ``model.dtype`` may also be
"auto" (``resolve_dtype``): bfloat16 on an accelerator where its normalisations allow it,
float32 on a CPU.
"""
from __future__ import annotations

from typing import Iterable, Optional

import jax
import jax.numpy as jnp

from normattn_jax.attention.registry import AttentionSpec

__all__ = ["AUTO", "BF16_TOLERANCES", "DTYPES", "check_compute_dtype", "resolve_dtype"]

#: A config's compute dtypes by name (``model.dtype``).
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
#: A sweep's ``model.dtype`` chosen by the machine and the normalisations (``resolve_dtype``).
AUTO = "auto"
#: How far a bf16 model's attention may lie from the same parameters' float32 attention, per
#: normalisation and implementation (tests/test_precision.py: MultiHeadAttention, 4 heads of 8,
#: 64 tokens, unit-normal inputs): ``output_rms`` the error's RMS over the output's RMS,
#: ``output_max`` its largest entry over the output's, ``gradient`` the parameters' gradient
#: error's norm over the gradient's norm. bf16 keeps 8 bits (a relative rounding of 2^-9 = 0.2%);
#: the projections' inputs, weights and outputs each round once, the logits' matmul and the
#: weighted sum sum 8-64 rounded terms: measured 0.5-1.1% RMS, 0.4-1.7% at worst, gradients
#: 0.5-1.6% (Scalable-Softmax's, whose scale multiplies the rounded logits, the most).
BF16_TOLERANCES = {"output_rms": 0.015, "output_max": 0.03, "gradient": 0.025}


def check_compute_dtype(normalization, dtype: str, field: str) -> None:
  """Refuse bfloat16 for a normalisation that needs float32 (``Normalization.needs_float32``),
  before anything is built.

  Args:
    normalization: a registered name or an ``AttentionSpec``.
    dtype: the config's compute dtype, a key of ``DTYPES`` or ``AUTO`` (which resolves to
      float32 for such a normalisation, so is never refused).
    field: the config field that holds it, for the message (e.g. "model.dtype").

  Raises:
    ValueError: ``config.<field>='bfloat16': normalization '<name>' needs float32: <why>``.
  """
  spec = AttentionSpec.of(normalization)
  reason = spec.normalization.needs_float32
  if dtype == "bfloat16" and reason:
    raise ValueError(f"config.{field}={dtype!r}: normalization {spec.name!r} needs float32: "
                     f"{reason}; use {field}='float32'")


def resolve_dtype(dtype: str, normalizations: Iterable, backend: Optional[str] = None) -> str:
  """The compute dtype that a config's ``dtype`` names: itself, or for "auto" bfloat16 on an
  accelerator (GPU, TPU: bf16 matmuls at several times float32's rate, half the bytes to move)
  where no normalisation of the model needs float32, else float32 (a CPU computes bf16 no
  faster; BENCHMARKS.md).

  Args:
    dtype: a key of ``DTYPES``, or ``AUTO``.
    normalizations: the model's attention normalisations (names or ``AttentionSpec`` objects; none
      for pooling).
    backend: the platform (``jax.default_backend()`` when None).

  Returns:
    A key of ``DTYPES``.
  """
  if dtype != AUTO:
    return dtype
  if (backend or jax.default_backend()) == "cpu" or any(
      AttentionSpec.of(n).normalization.needs_float32 for n in normalizations):
    return "float32"
  return "bfloat16"
