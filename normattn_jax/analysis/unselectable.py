"""Unselectable keys (Brody et al., Section 3): a key that no query can give the strictly highest
dot product, because it lies inside the convex hull of the other keys, can never be attended to
the most. LayerNorm's scaling puts every key on a sphere, where none is unselectable.
"""
from __future__ import annotations

import numpy as np

from normattn_jax._extras import require
from normattn_jax.validation import check_int

# A key is selectable if some query in the unit box [-1, 1]^d beats every other key by more than
# TOLERANCE times the key's spread (its largest coordinate difference to another key): a
# scale-free margin, so that the answer does not change when all keys are scaled together.
TOLERANCE = 1e-9


def spreads(points: np.ndarray) -> np.ndarray:
  """``max_{j, k} |x_jk - x_ik|`` for every point i: the scale its margin is measured against.

  Args:
    points: ``[n, d]``.

  Returns:
    ``[n]``.
  """
  return np.max(np.maximum(points.max(axis=0) - points, points - points.min(axis=0)), axis=1)


def _selectable_by_lp(points: np.ndarray, i: int, tol: float) -> bool:
  """max t s.t. q . (x_i - x_j) >= t for all j != i, q in [-1, 1]^d (HiGHS); selectable iff
  t > tol * spread_i.

  The box bounds the problem; by LP duality t is the l1 distance from x_i to the convex hull of
  the other points."""
  diffs = np.delete(points, i, axis=0) - points[i]            # rows x_j - x_i
  n, d = diffs.shape
  if n == 0:
    return True
  # variables (q, t): minimise -t subject to (x_j - x_i) . q + t <= 0
  a_ub = np.hstack([diffs, np.ones((n, 1))])
  bounds = [(-1.0, 1.0)] * d + [(None, None)]
  linprog = require("scipy.optimize", "analysis").linprog
  result = linprog(np.r_[np.zeros(d), -1.0], A_ub=a_ub, b_ub=np.zeros(n), bounds=bounds,
                   method="highs")
  if result.status != 0:
    raise RuntimeError(f"linprog failed for point {i}: {result.message}")
  return -result.fun > tol * float(np.abs(diffs).max())


def _obviously_selectable(points: np.ndarray, directions: int, seed: int,
                          tol: float = TOLERANCE) -> np.ndarray:
  """A cheap first pass: the argmax of the points along random directions and along each
  point's own direction from the centroid, where it wins by the LP's margin (the query scaled
  into the unit box), is selectable."""
  rng = np.random.default_rng(seed)
  queries = np.vstack([rng.standard_normal((directions, points.shape[1])),
                       points - points.mean(axis=0)])
  size = np.abs(queries).max(axis=1, keepdims=True)
  queries = queries[size[:, 0] > 0] / size[size[:, 0] > 0]      # into the unit box
  scores = queries @ points.T                                   # [queries, points]
  order = np.argsort(scores, axis=1)
  best, second = order[:, -1], order[:, -2] if points.shape[0] > 1 else order[:, -1]
  rows = np.arange(len(queries))
  margin = scores[rows, best] - scores[rows, second]
  strict = margin > tol * spreads(points)[best]
  found = np.zeros(points.shape[0], bool)
  found[best[strict]] = True
  return found


def unselectable(points, tol: float = TOLERANCE, directions: int = 64, seed: int = 0,
                 stop_at_first: bool = False) -> np.ndarray:
  """Bool array [n]: True where no query direction gives that point the strictly highest dot
  product among ``points [n, d]`` (it lies in the convex hull of the others). Exact, up to
  ``tol`` (relative to the point's spread, ``spreads``), through one LP per point not settled by
  the first pass. Vectors computed in float32 need a ``tol`` above its rounding (e.g. 1e-6):
  keys projected onto a subspace lie ~1e-7 off it, which makes hull points spuriously
  selectable by margins of that size. ``stop_at_first`` returns as soon as one unselectable
  point is found (the rest are then reported selectable).

  Args:
    points: ``[n, d]``, finite, n >= 1 (array-like).
    tol: the margin a query must win by, relative to the point's spread; >= 0.
    directions: random query directions of the first pass.
    seed: the seed of those directions.
    stop_at_first: stop at the first unselectable point.

  Returns:
    bool ``[n]``.

  Raises:
    ValueError: if ``points`` is not ``[n >= 1, d]`` or not finite, or ``tol < 0``.
    RuntimeError: if an LP fails.
  """
  points = np.asarray(points, np.float64)
  if points.ndim != 2 or points.shape[0] < 1:
    raise ValueError(f"points must have shape [n >= 1, d], got {points.shape}")
  if not np.isfinite(points).all():
    raise ValueError("points must be finite")
  if not tol >= 0:
    raise ValueError(f"tol must be >= 0, got {tol!r}")
  # The answer does not change when all points move or scale together; the LP solver's absolute
  # tolerances do, so it sees them centred and of unit size.
  points = points - points.mean(axis=0)
  size = np.abs(points).max()
  if size > 0:
    points = points / size
  result = np.zeros(points.shape[0], bool)
  if points.shape[0] == 1:
    return result
  settled = _obviously_selectable(points, directions, seed, tol)
  for i in np.flatnonzero(~settled):
    if not _selectable_by_lp(points, i, tol):
      result[i] = True
      if stop_at_first:
        break
  return result


def layer_norm(points: np.ndarray, eps: float = 0.0) -> np.ndarray:
  """LayerNorm without gain and bias: projection onto 1^perp, then scaling to norm sqrt(d).

  Args:
    points: ``[..., d]``.
    eps: added to the variance.

  Returns:
    The normalised points, of ``points``' shape.
  """
  centred = points - points.mean(axis=-1, keepdims=True)
  return centred / np.sqrt(np.mean(centred ** 2, axis=-1, keepdims=True) + eps)


def fraction_with_unselectable(d: int, n: int, runs: int, with_layer_norm: bool,
                               seed: int = 0) -> float:
  """Fig. 1c/1d: the fraction of ``runs`` draws of ``n`` standard-normal vectors in ``d`` dims
  (LayerNorm'd or not) with at least one unselectable vector.

  Args:
    d: the vectors' dimension.
    n: vectors per draw.
    runs: the number of draws, >= 1.
    with_layer_norm: LayerNorm each draw (``layer_norm``) first.
    seed: the seed; each (seed, d, n, with_layer_norm) has its own stream.

  Returns:
    A fraction in [0, 1].

  Raises:
    ValueError: naming the argument, for d < 1 (d < 2 with LayerNorm, which maps a single
      coordinate to 0 / 0), n < 1 or runs < 1.
  """
  check_int("d", d, low=2 if with_layer_norm else 1)
  check_int("n", n)
  check_int("runs", runs)
  rng = np.random.default_rng([seed, d, n, int(with_layer_norm)])
  hits = 0
  for _ in range(runs):
    points = rng.standard_normal((n, d))
    if with_layer_norm:
      points = layer_norm(points)
    hits += bool(unselectable(points, stop_at_first=True).any())
  return hits / runs


def fraction_grids(dims, ns, runs: int) -> dict:
  """Fig. 1c/1d: ``fraction_with_unselectable`` for every d x n, without and with LayerNorm.

  Args:
    dims: the dimensions d (rows).
    ns: the numbers of vectors n (columns).
    runs: draws per cell.

  Returns:
    ``{"without_layer_norm" | "with_layer_norm": [[fraction per n] per d]}``.
  """
  return {("with_layer_norm" if with_ln else "without_layer_norm"):
          [[fraction_with_unselectable(d, n, runs, with_ln) for n in ns] for d in dims]
          for with_ln in (False, True)}
