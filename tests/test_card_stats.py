"""The report card's statistics: scipy's bootstrap, rank test and false-discovery control,
checked against their definitions."""
import numpy as np
import pytest
from scipy import stats

from normattn_jax.card import stats as card_stats


def test_a_comparison_is_the_difference_of_means_with_its_interval_and_rank_test():
  rng = np.random.default_rng(3)
  card, base = rng.normal(1.0, 1.0, 20), rng.normal(0.0, 1.0, 20)
  c = card_stats.compare(card, base)
  assert c["difference"] == pytest.approx(card.mean() - base.mean())
  assert c["ci"][0] < c["difference"] < c["ci"][1]
  assert c["p"] == pytest.approx(stats.mannwhitneyu(card, base).pvalue)
  # Cliff's delta is the rank-biserial correlation 2U / (n m) - 1
  u = stats.mannwhitneyu(card, base).statistic
  assert c["effect"] == pytest.approx(2 * u / 400 - 1)
  assert c["n"] == [20, 20]
  assert card_stats.compare(card, base) == c  # the resamples repeat


def test_the_interval_narrows_with_more_seeds():
  rng = np.random.default_rng(0)
  width = lambda n: np.diff(card_stats.compare(rng.normal(0, 1, n), rng.normal(0, 1, n))["ci"])
  assert width(80) < width(10)


def test_separated_and_constant_arms():
  c = card_stats.compare([0.9, 0.95, 0.92], [0.1, 0.2, 0.15])
  assert c["effect"] == 1.0 and c["ci"][0] > 0
  same = card_stats.compare([0.5, 0.5], [0.5, 0.5])
  assert same["p"] == 1.0 and same["ci"] == [0.0, 0.0] and same["effect"] == 0.0
  shifted = card_stats.compare([1.0] * 5, [0.0] * 5)
  assert shifted["ci"] == [1.0, 1.0] and shifted["p"] < 0.05


def test_missing_seeds_are_left_out_and_too_few_refused():
  c = card_stats.compare([0.1, np.nan, 0.3, 0.2], [0.0, 0.1, 0.2, 0.3])
  assert c["n"] == [3, 4]
  with pytest.raises(ValueError, match="at least 2 finite"):
    card_stats.compare([0.1, np.nan], [0.0, 0.1])


def test_benjamini_hochberg_by_its_definition():
  p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
  m = len(p)
  q = np.minimum.accumulate((p * m / np.arange(1, m + 1))[::-1])[::-1]
  np.testing.assert_allclose(card_stats.controlled(p), np.minimum(q, 1))
  assert card_stats.controlled([]) == []


def test_words_follow_q_and_the_sign():
  word = lambda q, d, ci: card_stats.word({"q": q, "difference": d, "ci": ci})
  assert word(0.01, 0.2, [0.1, 0.3]) == "above"
  assert word(0.01, -0.2, [-0.3, -0.1]) == "below"
  assert word(0.2, 0.2, [0.1, 0.3]) == "not distinguishable"
  # a rank test that one far seed's mean contradicts: no direction is stated
  assert word(0.001, -0.03, [-0.06, 0.002]) == "not distinguishable"
  c = dict(card_stats.compare([0.5, 0.6, 0.55], [0.5, 0.58, 0.52]), q=0.8)
  text = card_stats.phrase(c, "softmax's 53.3%", "%", 100)
  assert text.startswith("not distinguishable from softmax's 53.3% with 3 seeds (")
  assert "CI" in text and "q = 0.8" in text and "no different" not in text
  c = dict(card_stats.compare([0.6, 0.62, 0.61], [0.5, 0.51, 0.52]), q=0.01)
  assert card_stats.phrase(c, "softmax's 51.0%", "%", 100).startswith("above softmax's 51.0% (+")
