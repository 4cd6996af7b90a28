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
normalisation on every implementation against them).
"""
from __future__ import annotations

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
