"""The statistics a report card's comparisons carry, all from ``scipy.stats``, each comparison one
estimand with its own test and interval:

- the estimand: the Hodges-Lehmann shift of the card's seeds against a baseline's (the median of
  every pairwise difference card_i - base_j), robust to one diverged seed, which moves a mean
  but not the ranks;
- its test: the two-sided Mann-Whitney U test (``mannwhitneyu``, scipy's ``method="auto"``:
  exact for small samples without ties, the normal approximation with the tie and continuity
  corrections otherwise), whose null hypothesis is a shift of 0;
- its interval: the same test inverted, the shifts that it does not reject at 1 -
  ``CONFIDENCE`` (the Moses interval, between two of the pairwise differences), so that the test
  rejects exactly where the interval leaves 0 out;
- equivalence within a declared margin m: two one-sided Mann-Whitney tests (TOST) of the shift
  against -m and +m, its p the larger of the two;
- a test across many arms: Kruskal-Wallis (``kruskal``), the Mann-Whitney test's extension;
- over many comparisons, Benjamini-Hochberg's false-discovery control
  (``false_discovery_control``).

Every function takes per-seed values as stored (None for a seed without one) and leaves the
missing ones out; the p-value functions also take a leading batch axis (``[..., seeds]``), for
the board's random splits of the seeds.

A word follows from one comparison's q-values (``word``): "above" / "below" where the column
ranks and the shift's q is below ``ALPHA``; "equivalent" where the equivalence test's q is;
"identical" where both arms take one value on every seed; otherwise "not resolved" with the
seeds at hand, its interval saying how large a shift could hide.
"""
from __future__ import annotations

from math import comb
from typing import Optional, Sequence

import numpy as np

from normattn_jax._extras import require

ALPHA = 0.05          # the false-discovery rate a verdict controls
CONFIDENCE = 0.95     # the intervals' level (the test inverted at 1 - CONFIDENCE)
FDR_METHOD = "Benjamini-Hochberg"
ESTIMAND = "Hodges-Lehmann shift"
TEST = "two-sided Mann-Whitney U"
WORDS = ("above", "below", "equivalent", "not resolved", "identical", "not ranked")


def _stats():
  return require("scipy.stats", "analysis")


def per_seed(values: Sequence) -> np.ndarray:
  """Per-seed values as stored (None for a seed without one, e.g. a diverged model) as float64,
  NaN for None."""
  return np.asarray([np.nan if v is None else v for v in values], np.float64)


def finite(values: Sequence) -> np.ndarray:
  """The finite per-seed values."""
  v = per_seed(values)
  return v[np.isfinite(v)]


def mean(values: Sequence) -> float:
  """The mean over the seeds that have a finite value; NaN where none has."""
  v = finite(values)
  return float(np.mean(v)) if v.size else float("nan")


def _values(x: Sequence, what: str) -> np.ndarray:
  v = finite(x)
  if v.size < 2:
    raise ValueError(f"{what}: a comparison needs at least 2 finite per-seed values, got {x!r}")
  return v


def hodges_lehmann(a, b) -> np.ndarray:
  """The two-sample Hodges-Lehmann shift: the median of every difference ``a_i - b_j``.

  Args:
    a, b: ``[..., n]`` and ``[..., m]`` samples (NaN left out).

  Returns:
    ``[...]``.
  """
  d = np.asarray(a, np.float64)[..., :, None] - np.asarray(b, np.float64)[..., None, :]
  return np.nanmedian(d.reshape(d.shape[:-2] + (-1,)), axis=-1)


def rank_p(a, b, alternative: str = "two-sided") -> np.ndarray:
  """Mann-Whitney's p of ``a`` against ``b`` along the last axis (NaN left out); 1 where every
  value of both is the same.

  Args:
    a, b: ``[..., n]`` and ``[..., m]`` (broadcastable batch axes).
    alternative: "two-sided", "greater" (a above b) or "less".

  Returns:
    float64 ``[...]`` (a float for 1-d samples).
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  batch = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
  both = np.concatenate([np.broadcast_to(a, batch + a.shape[-1:]),
                         np.broadcast_to(b, batch + b.shape[-1:])], axis=-1)
  constant = np.nanmax(both, axis=-1) == np.nanmin(both, axis=-1)
  nan = bool(np.isnan(both).any())
  p = _stats().mannwhitneyu(a, b, alternative=alternative, axis=-1,
                            nan_policy="omit" if nan else "propagate").pvalue
  p = np.where(constant | ~np.isfinite(p), 1.0, p)
  return float(p) if np.ndim(p) == 0 else p


def equivalence_p(a, b, margin: Optional[float]) -> np.ndarray:
  """Two one-sided Mann-Whitney tests (TOST) that the shift of ``a`` against ``b`` lies within
  ``(-margin, +margin)``: the larger p of "a + margin above b" and "a - margin below b"; 1
  where there is no margin.

  Args:
    a, b: ``[..., n]`` and ``[..., m]``.
    margin: the declared margin (> 0), in the values' units; None or 0: no equivalence test.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if not margin:
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    return 1.0 if not shape else np.ones(shape)
  return np.maximum(rank_p(a + margin, b, "greater"), rank_p(a - margin, b, "less"))


def shift_interval(a: np.ndarray, b: np.ndarray, level: float = CONFIDENCE) -> list[float]:
  """The shifts ``s`` at which Mann-Whitney's two-sided test of ``a - s`` against ``b`` does not
  reject at ``1 - level`` (the test inverted), as ``[low, high]``.

  The p-value changes only where ``a - s`` meets a value of ``b``, at the pairwise differences,
  and is constant between two of them, so the test is asked once inside each cell between (and
  beyond) them, away from the ties that a shift onto a difference would make: the interval runs
  between two differences (the Moses interval), or to infinity where too few seeds can reject
  any shift, or is the one difference where every pairwise difference is the same.
  """
  d = np.unique((a[:, None] - b[None, :]).ravel())
  shifts = np.concatenate([(d[:-1] + d[1:]) / 2, d[:1] - 1.0, d[-1:] + 1.0])
  lows = np.concatenate([d[:-1], [-np.inf], d[-1:]])  # each cell's ends
  highs = np.concatenate([d[1:], d[:1], [np.inf]])
  p = np.atleast_1d(rank_p(a[None, :] - shifts[:, None], b[None, :]))
  kept = p >= 1 - level
  if not kept.any():  # every cell rejected: the interval shrinks to the differences' one point
    centre = float(hodges_lehmann(a, b))
    return [centre, centre]
  low, high = lows[kept].min(), highs[kept].max()
  return [float(low), float(high)]


def compare(card: Sequence[float], base: Sequence[float], margin: Optional[float] = None) -> dict:
  """One comparison of the card's seeds with a baseline's (independent samples).

  Args:
    card: the card's per-seed values (None and non-finite ones, e.g. of diverged seeds, left
      out).
    base: the baseline's.
    margin: the equivalence margin, in the values' units (None: no equivalence test).

  Returns:
    ``{"shift"`` (Hodges-Lehmann), ``"ci": [low, high]`` (the Mann-Whitney test inverted,
    ``CONFIDENCE``), ``"p"`` (two-sided Mann-Whitney), ``"p_equivalent"`` (TOST within
    ``margin``; 1 without one), ``"effect"`` (Cliff's delta, 2U/(n m) - 1: +1 when every card
    seed lies above every baseline seed), ``"margin"``, ``"identical"`` (both arms one value on
    every seed), ``"n": [card seeds, baseline seeds]}``.

  Raises:
    ValueError: for fewer than 2 finite values on either side.
  """
  a, b = _values(card, "card"), _values(base, "baseline")
  identical = bool(np.ptp(np.concatenate([a, b])) == 0)
  return {"shift": float(hodges_lehmann(a, b)), "ci": shift_interval(a, b),
          "p": float(rank_p(a, b)), "p_equivalent": float(equivalence_p(a, b, margin)),
          "effect": float(np.mean(np.sign(a[:, None] - b[None, :]))), "margin": margin,
          "identical": identical, "n": [int(a.size), int(b.size)]}


def kruskal_p(samples: Sequence) -> np.ndarray:
  """Kruskal-Wallis's p across the arms' samples (each ``[..., seeds]``, NaN left out); 1 where
  every value is the same or fewer than two arms have values."""
  arrays = [np.asarray(s, np.float64) for s in samples]
  arrays = [s for s in arrays if np.isfinite(s).any()]
  if len(arrays) < 2:
    return 1.0
  nan = any(np.isnan(s).any() for s in arrays)
  with np.errstate(invalid="ignore", divide="ignore"):  # every value alike: p is NaN, read 1
    p = _stats().kruskal(*arrays, axis=-1, nan_policy="omit" if nan else "propagate").pvalue
  p = np.where(np.isfinite(p), p, 1.0)
  return float(p) if np.ndim(p) == 0 else p


def controlled(p_values, axis: int = -1) -> list:
  """Benjamini-Hochberg adjusted p-values (q) of a family of comparisons, in their order (along
  ``axis`` for a batch of families)."""
  p = np.asarray(p_values, np.float64)
  if not p.size:
    return [] if p.ndim <= 1 else p
  q = _stats().false_discovery_control(p, axis=axis, method="bh")
  return [float(x) for x in q] if p.ndim == 1 else q


def smallest_p(n: int, m: int) -> float:
  """The smallest two-sided Mann-Whitney p that ``n`` against ``m`` seeds can give (every seed
  of one arm above every seed of the other), by the test as the card runs it."""
  return float(rank_p(np.arange(n, dtype=np.float64) + m, np.arange(m, dtype=np.float64)))


def possible_arrangements(n: int, m: int) -> int:
  """How many ways ``n`` card seeds and ``m`` baseline seeds can be ranked: the exact test's
  resolution is 2 / this."""
  return comb(n + m, n)


def word(comparison: dict, ranks: bool = True) -> str:
  """A comparison's word from its q-values: "identical" where both arms take one value on every
  seed; "above" / "below" where its column ranks (``ranks``) and the shift's q is below
  ``ALPHA``; "equivalent" where the equivalence test's q is; otherwise "not resolved"."""
  if comparison.get("identical"):
    return "identical"
  if ranks and comparison.get("q") is not None and comparison["q"] < ALPHA:
    direction = comparison["shift"] or comparison["effect"]
    return "above" if direction > 0 else "below"
  if (comparison.get("q_equivalent") or 1.0) < ALPHA:
    return "equivalent"
  return "not resolved"


def numbers(comparison: dict, unit: str = "", scale: float = 1.0) -> str:
  """A comparison's numbers: ``shift +2.5%, 95% CI +0.8% to +4.1%; q = 0.01`` (its p where it
  was not tested for a difference, and the equivalence test's q where it was run)."""
  s, (low, high) = comparison["shift"], comparison["ci"]
  text = (f"shift {scale * s:+.3g}{unit}, {CONFIDENCE:.0%} CI {scale * low:+.3g}{unit} to "
          f"{scale * high:+.3g}{unit}; ")
  text += (f"q = {comparison['q']:.2g}" if comparison.get("q") is not None else
           f"p = {comparison['p']:.2g}, no difference tested where the column does not rank")
  if comparison.get("q_equivalent") is not None:
    text += f", equivalence q = {comparison['q_equivalent']:.2g}"
  return text


def phrase(comparison: dict, baseline: str, unit: str = "", scale: float = 1.0,
           ranks: bool = True) -> str:
  """A comparison in words: ``above softmax's 85.0% (shift +2.5%, 95% CI +0.8% to +4.1%;
  q = 0.01)``, ``equivalent to softmax's 99.4% within ±0.5% (...)`` or ``not resolved against
  softmax's 85.0% with 20 seeds (...)``.

  Args:
    comparison: ``compare``'s result with its ``q`` and ``q_equivalent``.
    baseline: what the card is compared with, e.g. "softmax's 85.0%".
    unit: the numbers' unit.
    scale: the numbers' factor (100 for a share shown in percent).
    ranks: whether the comparison's column ranks (else no direction is stated).
  """
  w = comparison.get("word") if comparison.get("word") == "not ranked" else word(comparison, ranks)
  shown = numbers(comparison, unit, scale)
  if w == "not ranked":
    return f"not ranked against {baseline} ({shown})"
  if w == "identical":
    return f"identical to {baseline} on every seed"
  if w == "equivalent":
    return (f"equivalent to {baseline} within ±{scale * comparison['margin']:.3g}{unit} "
            f"({shown})")
  if w == "not resolved":
    return f"not resolved against {baseline} with {min(comparison['n'])} seeds ({shown})"
  return f"{w} {baseline} ({shown})"
