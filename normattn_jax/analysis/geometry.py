"""Two small geometric views of the normalisations.

* ``sinkhorn_residuals`` (Ding et al., Section 3.2): how far rows and columns of the Sinkhorn
  weights are from summing to 1 after each iteration; one iteration is DNAS.
* ``pooled_output_scale`` (Richter & Wattenhofer, Fig. 1, Appendix B): at initialisation, the
  standard deviation and mean norm of a pooled output against the sequence length N; softmax
  attention shrinks like mean pooling, so longer sequences carry less context.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention.weights import sinkhorn_weights, softmax_weights

POOLINGS = ("softmax attention", "mean", "sum", "max", "normalised sum")


def sinkhorn_residuals(logits: jax.Array, max_iters: int) -> dict:
  """Per iteration 1..max_iters: the largest |row sum - 1| and |column sum - 1|.

  Args:
    logits: floating-point logits ``[..., q, k]``.
    max_iters: the most Sinkhorn iterations, >= 1.

  Returns:
    ``{"row": [...], "column": [...]}``: ``max_iters`` floats each, iteration 1 first.
  """
  rows, cols = [], []
  for iters in range(1, max_iters + 1):
    w = sinkhorn_weights(logits, iters)
    rows.append(float(jnp.max(jnp.abs(w.sum(-1) - 1))))
    cols.append(float(jnp.max(jnp.abs(w.sum(-2) - 1))))
  return {"row": rows, "column": cols}


def pool(values: jax.Array, queries: jax.Array, keys: jax.Array, method: str) -> jax.Array:
  """One pooled output per position of ``values [sequences, N, d]`` (broadcast for reductions).

  Args:
    values: ``[sequences, N, d]``.
    queries: ``[sequences, N, d]`` (softmax attention only).
    keys: ``[sequences, N, d]`` (softmax attention only).
    method: one of ``POOLINGS``.

  Returns:
    ``[sequences, N, d]`` for softmax attention, ``[sequences, 1, d]`` for the reductions.

  Raises:
    ValueError: if ``method`` is not one of ``POOLINGS``.
  """
  if method == "softmax attention":
    logits = jnp.einsum("bqd,bkd->bqk", queries, keys) / jnp.sqrt(queries.shape[-1])
    return softmax_weights(logits) @ values
  if method == "mean":
    return jnp.mean(values, axis=1, keepdims=True)
  if method == "sum":
    return jnp.sum(values, axis=1, keepdims=True)
  if method == "max":
    return jnp.max(values, axis=1, keepdims=True)
  if method == "normalised sum":  # normalised over the vector dimension
    s = jnp.sum(values, axis=1, keepdims=True)
    return (s - s.mean(-1, keepdims=True)) / s.std(-1, keepdims=True)
  raise ValueError(f"method must be one of {POOLINGS}, got {method!r}")


def pooled_output_scale(length: int, head_dim: int = 128, total: int = 16384,
                        seed: int = 0) -> dict:
  """Std over all output values and mean output norm, per pooling, for ``total`` standard-normal
  value/key/query vectors split into sequences of ``length`` (the paper: 16,384, d_h = 128).

  Args:
    length: the sequence length N.
    head_dim: the vectors' dimension d_h.
    total: the number of vectors of each kind, split into ``max(total // length, 1)`` sequences.
    seed: the seed of the random vectors.

  Returns:
    ``{pooling: {"std": float, "norm": float}}`` for each of ``POOLINGS``.
  """
  sequences = max(total // length, 1)
  kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
  shape = (sequences, length, head_dim)
  q, k, v = (jax.random.normal(key, shape) for key in (kq, kk, kv))
  stats = {}
  for method in POOLINGS:
    out = pool(v, q, k, method)
    stats[method] = {"std": float(jnp.std(out)),
                     "norm": float(jnp.mean(jnp.linalg.norm(out, axis=-1)))}
  return stats


def scaling_exponent(lengths, values) -> float:
  """Slope of log(value) against log(N): -0.5 for mean pooling, +0.5 for sum.

  Args:
    lengths: the sequence lengths, positive.
    values: one positive value per length.

  Returns:
    The least-squares slope.
  """
  return float(np.polyfit(np.log(lengths), np.log(values), 1)[0])


# The runs of the figures: Sinkhorn on 64 x 64 logits of three scales, and the paper's N.
SINKHORN_SCALES = (1.0, 3.0, 10.0)
LENGTHS = (1, 2, 4, 8, 16, 32, 64, 128, 512, 1024, 2048)


def sinkhorn_by_logit_scale(scales=SINKHORN_SCALES, size: int = 64, max_iters: int = 30) -> dict:
  """``sinkhorn_residuals`` of standard-normal logits ``[size, size]`` times each scale.

  Returns:
    ``{"logit_std=<scale>": {"row", "column"}}``, in the order of ``scales``.
  """
  logits = jax.random.normal(jax.random.key(0), (size, size))
  return {f"logit_std={scale:g}": sinkhorn_residuals(scale * logits, max_iters)
          for scale in scales}


def pooled_output_scales(lengths=LENGTHS) -> dict:
  """``pooled_output_scale`` at each sequence length: ``{N: {pooling: {"std", "norm"}}}``."""
  return {n: pooled_output_scale(n) for n in lengths}


def pooling_exponents(scales: dict, skip: int = 2) -> dict:
  """The log-log slope of each pooling's std and norm against N (``scaling_exponent``), the
  ``skip`` shortest lengths left out (N = 1, 2 by default: the slopes hold from N = 4).

  Args:
    scales: ``pooled_output_scales``' result.
    skip: how many of the shortest lengths to leave out.

  Returns:
    ``{"<pooling> std" | "<pooling> norm": slope}``.
  """
  lengths = list(scales)[skip:]
  return {f"{method} {key}": scaling_exponent(lengths, [scales[n][method][key] for n in lengths])
          for method in POOLINGS for key in ("std", "norm")}
