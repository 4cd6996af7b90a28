"""Explaining away (Ding et al., Definition 1, Fig. 1): a lower-layer position j is
epsilon-explained-away when its total attention weight over all queries, sum_i pi_ij, falls below
epsilon. UNAS allows it; DNAS keeps every sum >= 1/S (Theorem 2).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

EPSILON = 1e-8


def attention_weights(model, params, tokens) -> list[jax.Array]:
  """The attention weights ``[batch, heads, q, k]`` of every layer of a ``SequenceModel``.

  Args:
    model: a ``SequenceModel`` with attention layers.
    params: its variables (``{"params": ...}``).
    tokens: int tokens ``[batch, N]``.

  Returns:
    One array ``[batch, heads, N, N]`` per layer, in layer order.
  """
  _, state = model.apply(params, tokens, sow_weights=True, mutable=["intermediates"])
  layers = state["intermediates"]
  return [layers[name]["attention"]["attention_weights"][0]
          for name in sorted(layers, key=lambda n: int(n.split("_")[-1]))]


def key_weight_sums(weights: jax.Array) -> np.ndarray:
  """Per key, the weight summed over the queries: ``[..., k]``.

  Args:
    weights: attention weights ``[..., q, k]``.

  Returns:
    float32 numpy ``[..., k]``.
  """
  return np.asarray(jnp.sum(weights.astype(jnp.float32), axis=-2))


def explained_away_fraction(sums: np.ndarray, epsilon: float = EPSILON) -> float:
  """The fraction of keys whose summed weight is below ``epsilon``.

  Args:
    sums: per-key weight sums (``key_weight_sums``), any shape.
    epsilon: the threshold.

  Returns:
    A fraction in [0, 1].
  """
  return float(np.mean(np.asarray(sums) < epsilon))
