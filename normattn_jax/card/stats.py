"""The statistics a report card's comparisons carry: for two arms' per-seed values, the
difference of the means with a 95% bootstrap confidence interval, an effect size and a rank
test's p-value; over many comparisons, Benjamini-Hochberg's false-discovery control. All from
scipy.stats, nothing written again: ``bootstrap`` (percentile intervals, each arm's seeds
resampled on their own, as rliable's stratified bootstrap), ``mannwhitneyu`` and
``false_discovery_control``.

A verdict word follows from the controlled p-value (q) and the interval: "above" or "below"
where q < ``ALPHA`` and the interval excludes 0, otherwise "not distinguishable": with the seeds
at hand, the difference is inside the noise, which says nothing of its absence.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from normattn_jax._extras import require

ALPHA = 0.05          # the false-discovery rate a verdict controls
CONFIDENCE = 0.95     # the confidence intervals' level
RESAMPLES = 9999      # bootstrap resamples
BOOTSTRAP_SEED = 0    # the resamples are drawn alike every time: a card's numbers repeat
FDR_METHOD = "Benjamini-Hochberg"


def per_seed(values: Sequence) -> np.ndarray:
  """Per-seed values as stored (None for a seed without one, e.g. a diverged model) as float64,
  NaN for None."""
  return np.asarray([np.nan if v is None else v for v in values], np.float64)


def mean(values: Sequence) -> float:
  """The mean over the seeds that have a finite value; NaN where none has."""
  v = per_seed(values)
  return float(np.mean(v[np.isfinite(v)])) if np.isfinite(v).any() else float("nan")


def _values(x: Sequence, what: str) -> np.ndarray:
  v = per_seed(x)
  v = v[np.isfinite(v)]
  if v.size < 2:
    raise ValueError(f"{what}: a comparison needs at least 2 finite per-seed values, got {x!r}")
  return v


def _mean_difference(a, b, axis=-1):
  return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def compare(card: Sequence[float], base: Sequence[float]) -> dict:
  """One comparison of the card's seeds with a baseline's (independent samples).

  Args:
    card: the card's per-seed values (None and non-finite ones, e.g. of diverged seeds, left
      out).
    base: the baseline's.

  Returns:
    ``{"difference": mean(card) - mean(base), "ci": [low, high]`` (percentile bootstrap,
    ``CONFIDENCE``), ``"effect"`` (the rank-biserial correlation 2U/(n m) - 1, Cliff's delta:
    +1 when every card seed lies above every baseline seed), ``"p"`` (two-sided Mann-Whitney
    U), ``"n": [card seeds, baseline seeds]}``.

  Raises:
    ValueError: for fewer than 2 finite values on either side.
  """
  a, b = _values(card, "card"), _values(base, "baseline")
  difference = float(_mean_difference(a, b))
  if np.ptp(a) == 0 and np.ptp(b) == 0:  # every resample alike: the interval is the point
    ci = [difference, difference]
  else:
    stats = require("scipy.stats", "analysis")
    boot = stats.bootstrap((a, b), _mean_difference, n_resamples=RESAMPLES,
                           confidence_level=CONFIDENCE, method="percentile", vectorized=True,
                           random_state=np.random.default_rng(BOOTSTRAP_SEED)).confidence_interval
    ci = [float(boot.low), float(boot.high)]
  effect = float(np.mean(np.sign(a[:, None] - b[None, :])))
  return {"difference": difference, "ci": ci, "effect": effect, "p": _p_value(a, b),
          "n": [int(a.size), int(b.size)]}


def _p_value(a: np.ndarray, b: np.ndarray) -> float:
  """The two-sided Mann-Whitney p; 1 where every value of both arms is the same."""
  if np.ptp(np.concatenate([a, b])) == 0:
    return 1.0
  stats = require("scipy.stats", "analysis")
  return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def controlled(p_values: Sequence[float]) -> list[float]:
  """Benjamini-Hochberg adjusted p-values (q) of a family of comparisons, in their order."""
  if not len(p_values):
    return []
  stats = require("scipy.stats", "analysis")
  return [float(q) for q in stats.false_discovery_control(np.asarray(p_values, np.float64),
                                                          method="bh")]


def word(comparison: dict) -> str:
  """"above" / "below" where the controlled p-value (``comparison["q"]``) is below ``ALPHA``
  and the confidence interval of the difference lies on that side of 0; otherwise "not
  distinguishable". The rank test and the interval of the means can disagree (one far seed moves
  a mean, not the ranks): a direction is stated only where both carry it."""
  low, high = comparison["ci"]
  if comparison["q"] < ALPHA and (low > 0 or high < 0):
    return "above" if comparison["difference"] > 0 else "below"
  return "not distinguishable"


def phrase(comparison: dict, baseline: str, unit: str = "", scale: float = 1.0) -> str:
  """A comparison in words, judged on its q: ``above softmax's 85.0% (+2.5%, CI +0.8% to +4.1%;
  q = 0.01)`` or ``not distinguishable from softmax's 85.0% with 20 seeds (...)``.

  Args:
    comparison: ``compare``'s result with its ``q``.
    baseline: what the card is compared with, e.g. "softmax's 85.0%".
    unit: the numbers' unit.
    scale: the numbers' factor (100 for a share shown in percent).
  """
  d, (low, high), q = comparison["difference"], comparison["ci"], comparison["q"]
  numbers = (f"{scale * d:+.3g}{unit}, CI {scale * low:+.3g}{unit} to {scale * high:+.3g}{unit}; "
             f"q = {q:.2g}")
  w = word(comparison)
  if w == "not distinguishable":
    return f"not distinguishable from {baseline} with {min(comparison['n'])} seeds ({numbers})"
  return f"{w} {baseline} ({numbers})"
