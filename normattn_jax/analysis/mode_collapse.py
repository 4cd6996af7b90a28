"""Mode collapse under attention (Ding et al., Appendix E): self-attention with Q = K = V = I and
Gaussian weights pi_ij ~ N(x_i | x_j, I) pulls points together; UNAS (Eq. 3) merges an unbalanced
pair of clusters within a few steps, DNAS (Eq. 7-8) keeps them apart. Any registered
normalisation (a name or an ``AttentionSpec``) can take their place, at its initial per-head
parameters.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from normattn_jax._extras import require
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.attention.weights import dnas_weights, softmax_weights

UPDATES = {"unas": softmax_weights, "dnas": dnas_weights}


def weight_function(scheme):
  """The weights ``[n, n] -> [n, n]`` of a scheme: "unas" or "dnas" (the paper's), else a
  registered normalisation at its initial per-head parameters (one head).

  Args:
    scheme: "unas", "dnas", a registered normalisation's name or an ``AttentionSpec``.

  Returns:
    A function of the logits ``[n, n]``.

  Raises:
    ValueError: if ``scheme`` names no registered normalisation or its options are refused.
  """
  if isinstance(scheme, str) and scheme in UPDATES:
    return UPDATES[scheme]
  spec = AttentionSpec.of(scheme)
  norm, options = spec.normalization, spec.resolved()
  params = norm.initial_params(1, options)
  return lambda logits: norm.attention_weights(logits[None], None, params, options)[0]


def two_gaussians(n0: int = 500, n1: int = 50, center0=(1.8, 0.7), center1=(-1.0, -1.0),
                  variance: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """The paper's toy data: (points [n0 + n1, 2], cluster label per point).

  Args:
    n0: points of cluster 0 (the large one).
    n1: points of cluster 1.
    center0: cluster 0's centre, 2-D.
    center1: cluster 1's centre, 2-D.
    variance: each coordinate's variance.
    seed: the seed of the draw.

  Returns:
    ``(points, labels)``: float ``[n0 + n1, 2]`` and int ``[n0 + n1]`` (0 or 1), cluster 0 first.
  """
  rng = np.random.default_rng(seed)
  points = np.vstack([rng.normal(center0, np.sqrt(variance), (n0, 2)),
                      rng.normal(center1, np.sqrt(variance), (n1, 2))])
  return points, np.r_[np.zeros(n0, int), np.ones(n1, int)]


def attention_step(points: np.ndarray, scheme: str) -> np.ndarray:
  """x_i <- sum_j pi_ij x_j with logits -|x_i - x_j|^2 / 2, normalised by UNAS or DNAS.

  Args:
    points: ``[n, d]``.
    scheme: "unas", "dnas" or any registered normalisation (``weight_function``).

  Returns:
    float32 ``[n, d]``: the updated points.
  """
  x = jnp.asarray(points, jnp.float32)
  logits = -0.5 * jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
  return np.asarray(weight_function(scheme)(logits) @ x)


def trajectory(points: np.ndarray, scheme: str, steps: int = 4) -> list[np.ndarray]:
  """The point cloud before and after each of ``steps`` attention updates.

  Args:
    points: ``[n, d]``.
    scheme: "unas", "dnas" or any registered normalisation (``weight_function``).
    steps: the number of updates.

  Returns:
    ``steps + 1`` arrays ``[n, d]``, the given points first.
  """
  clouds = [np.asarray(points)]
  for _ in range(steps):
    clouds.append(attention_step(clouds[-1], scheme))
  return clouds


def count_clusters(points: np.ndarray, gap: float = 0.5, min_fraction: float = 0.02) -> int:
  """Modes left: single-linkage components (members within ``gap`` of each other) holding at
  least ``min_fraction`` of the points, so that a stray sample is not counted as a mode.

  Args:
    points: ``[n, d]``.
    gap: the largest distance that links two points, in the points' units.
    min_fraction: the smallest share of the points a counted mode holds.

  Returns:
    The number of modes (``n`` for fewer than 2 points); a point that diverged (a non-finite
    coordinate, e.g. under an unnormalised attention) belongs to no mode.

  Raises:
    ImportError: if scipy is not installed (the ``analysis`` extra).
  """
  total = len(points)
  points = points[np.isfinite(points).all(axis=-1)]
  if len(points) < 2:
    return len(points)
  hierarchy = require("scipy.cluster.hierarchy", "analysis")
  tree = hierarchy.linkage(points, method="single")
  labels = hierarchy.fcluster(tree, t=gap, criterion="distance")
  return int((np.bincount(labels) >= min_fraction * total).sum())


def center_distance_unas(r, a):
  """Eq. 13: distance of the two 1-D cluster centres (at +-a, mass ratio r = N0/N1) after UNAS.

  Args:
    r: the mass ratio N0/N1 (array-like).
    a: the centres' distance from 0, before the update (array-like).

  Returns:
    The distance of the centres after the update, ``r`` and ``a`` broadcast.
  """
  r, s = np.asarray(r, float), np.exp(-2.0 * np.asarray(a, float) ** 2)
  return 2 * r * (1 - s ** 2) * a / ((1 + r * s) * (r + s))


def center_distance_dnas(r, a):
  """Eq. 14: the same after DNAS, with q = (r + s) / (r s + 1).

  Args:
    r: the mass ratio N0/N1 (array-like).
    a: the centres' distance from 0, before the update (array-like).

  Returns:
    The distance of the centres after the update, ``r`` and ``a`` broadcast.
  """
  r, s = np.asarray(r, float), np.exp(-2.0 * np.asarray(a, float) ** 2)
  q = (r + s) / (r * s + 1)
  return 2 * q * r * (1 - s ** 2) * a / ((q + r * s) * (r + s * q))


def simulated_center_distance(n0: int, n1: int, a: float, scheme: str) -> float:
  """One update of two point masses (n0 copies of +a, n1 of -a) in 1-D: Eq. 13/14's setting.

  Args:
    n0: copies of +a, at least 1.
    n1: copies of -a, at least 1.
    a: the masses' distance from 0.
    scheme: "unas" or "dnas".

  Returns:
    The distance of the two masses after the update.
  """
  points = np.r_[np.full(n0, a), np.full(n1, -a)][:, None]
  moved = attention_step(points, scheme)[:, 0]
  return float(moved[0] - moved[-1])


# Appendix E's runs: two clusters of unequal and of equal size (Fig. 6, 8, 9), and the mass
# ratios and centre distances at which Eq. 13/14 meet the simulated update (Fig. 7).
CLOUDS = {"unbalanced": (500, 50), "balanced": (225, 225)}
DISTANCE_SCALES = (0.5, 1.0, 1.5)
DISTANCE_SIZES = ((5, 50), (10, 20), (20, 20), (40, 10), (60, 6))
ANALYTIC = {"unas": center_distance_unas, "dnas": center_distance_dnas}


def trajectories(points: np.ndarray) -> dict:
  """Fig. 6, 8, 9: the cloud before and after each update (``trajectory``), per scheme.

  Args:
    points: ``[n, d]``.

  Returns:
    ``{"unas" | "dnas": [steps + 1 arrays [n, d]]}``.
  """
  return {scheme: trajectory(points, scheme) for scheme in ANALYTIC}


def cluster_counts(clouds: dict) -> dict:
  """The modes left in each cloud of ``trajectories`` (``count_clusters``), per scheme."""
  return {scheme: [count_clusters(cloud) for cloud in steps] for scheme, steps in clouds.items()}


def center_distance_check(scales=DISTANCE_SCALES, sizes=DISTANCE_SIZES,
                          ratios=np.geomspace(0.05, 20, 200)) -> dict:
  """Fig. 7: Eq. 13/14 over the mass ratio r, and the simulated update of point masses beside
  them.

  Args:
    scales: the centres' distances a from 0.
    sizes: ``(N0, N1)`` of each simulated pair of masses.
    ratios: the r at which the equations are evaluated.

  Returns:
    ``{"ratios": ratios, "scales": {a: {"unas", "dnas": Eq. 13 / 14 at ratios, "simulated":
    [{"r", "scheme", "simulated", "analytic"}, ...]}}}``.
  """
  out = {}
  for a in scales:
    simulated = [{"r": n0 / n1, "scheme": scheme,
                  "simulated": simulated_center_distance(n0, n1, a, scheme),
                  "analytic": float(ANALYTIC[scheme](n0 / n1, a))}
                 for n0, n1 in sizes for scheme in ANALYTIC]
    out[a] = {**{scheme: equation(ratios, a) for scheme, equation in ANALYTIC.items()},
              "simulated": simulated}
  return {"ratios": ratios, "scales": out}


def largest_error(check: dict) -> float:
  """The largest |simulated - analytic| centre distance of ``center_distance_check``."""
  return max(abs(point["simulated"] - point["analytic"])
             for scale in check["scales"].values() for point in scale["simulated"])
