"""The report card's statistics: one estimand per comparison (the Hodges-Lehmann shift) with its
own test (Mann-Whitney) and that test's inverted interval, equivalence by two one-sided tests,
Kruskal-Wallis across arms and false-discovery control, all from scipy.stats and checked against
their definitions."""
import numpy as np
import pytest
from scipy import stats

from normattn_jax.card import stats as card_stats


def test_a_comparison_is_the_shift_with_its_own_test_and_interval():
  rng = np.random.default_rng(3)
  card, base = rng.normal(1.0, 1.0, 20), rng.normal(0.0, 1.0, 20)
  c = card_stats.compare(card, base, margin=0.1)
  assert c["shift"] == pytest.approx(np.median(card[:, None] - base[None, :]))
  assert c["ci"][0] < c["shift"] < c["ci"][1]
  assert c["p"] == pytest.approx(stats.mannwhitneyu(card, base).pvalue)
  # Cliff's delta is the rank-biserial correlation 2U / (n m) - 1
  u = stats.mannwhitneyu(card, base).statistic
  assert c["effect"] == pytest.approx(2 * u / 400 - 1)
  assert c["n"] == [20, 20] and not c["identical"]
  # the interval is the test inverted: just inside its ends the shifted sample is not
  # rejected, just outside it is
  for end in c["ci"]:
    step = 1e-9 * np.sign(c["shift"] - end)
    assert stats.mannwhitneyu(card - (end + step), base).pvalue >= 1 - card_stats.CONFIDENCE
    assert stats.mannwhitneyu(card - (end - step), base).pvalue < 1 - card_stats.CONFIDENCE


def test_the_test_rejects_exactly_where_the_interval_leaves_zero_out():
  rng = np.random.default_rng(7)
  for _ in range(40):
    n, m = rng.integers(4, 21, 2)
    card, base = rng.normal(rng.normal() * 0.8, 1.0, n), rng.normal(0.0, 1.0, m)
    c = card_stats.compare(np.round(card, 1), np.round(base, 1))
    low, high = c["ci"]
    assert low <= c["shift"] <= high
    if low != 0 and high != 0:
      assert (c["p"] < 0.05) == (not low < 0 < high), c


def test_one_diverged_seed_moves_the_mean_not_the_word():
  """19 seeds above the baseline's and one diverged far below: the mean difference is
  negative and a bootstrap interval of it spans 0, while the ranks separate. The word and its
  interval follow the shift, which the one seed does not move."""
  base = np.linspace(0.50, 0.52, 20)
  card = np.concatenate([np.linspace(0.55, 0.57, 19), [-5.0]])
  assert card.mean() < base.mean()
  c = card_stats.compare(card, base)
  assert c["shift"] > 0 and c["ci"][0] > 0 and c["p"] < 1e-5
  assert card_stats.word(dict(c, q=c["p"])) == "above"


def test_the_interval_narrows_with_more_seeds():
  rng = np.random.default_rng(0)
  width = lambda n: np.diff(card_stats.compare(rng.normal(0, 1, n), rng.normal(0, 1, n))["ci"])
  assert width(80) < width(10)


def test_separated_constant_and_too_few_arms():
  c = card_stats.compare([0.9, 0.95, 0.92], [0.1, 0.2, 0.15])
  assert c["effect"] == 1.0 and c["shift"] > 0
  same = card_stats.compare([0.5, 0.5], [0.5, 0.5])
  assert same["p"] == 1.0 and same["identical"] and same["effect"] == 0.0
  shifted = card_stats.compare([1.0] * 5, [0.0] * 5)
  assert shifted["ci"] == [1.0, 1.0] and shifted["p"] < 0.05 and not shifted["identical"]
  # two seeds against two can reject no shift: the interval is unbounded
  assert card_stats.compare([1.0, 2.0], [3.0, 4.0])["ci"] == [-np.inf, np.inf]


def test_missing_seeds_are_left_out_and_too_few_refused():
  c = card_stats.compare([0.1, np.nan, 0.3, None, 0.2], [0.0, 0.1, 0.2, 0.3])
  assert c["n"] == [3, 4]
  with pytest.raises(ValueError, match="at least 2 finite"):
    card_stats.compare([0.1, np.nan], [0.0, 0.1])


def test_equivalence_within_the_margin_by_two_one_sided_tests():
  rng = np.random.default_rng(1)
  base = rng.normal(0.99, 0.001, 20)
  close, far = base + rng.normal(0, 0.0005, 20), base + 0.02
  assert card_stats.equivalence_p(close, base, 0.005) < 0.01
  assert card_stats.equivalence_p(far, base, 0.005) > 0.5
  assert card_stats.equivalence_p(close, base, None) == 1.0
  # its p is the larger of the two one-sided Mann-Whitney tests
  expected = max(stats.mannwhitneyu(close + 0.005, base, alternative="greater").pvalue,
                 stats.mannwhitneyu(close - 0.005, base, alternative="less").pvalue)
  assert card_stats.equivalence_p(close, base, 0.005) == pytest.approx(expected)


def test_batched_p_values_are_each_rows_own():
  rng = np.random.default_rng(2)
  a, b = rng.normal(0, 1, (5, 10)), rng.normal(0.5, 1, (5, 10))
  np.testing.assert_allclose(card_stats.rank_p(a, b),
                             [stats.mannwhitneyu(x, y).pvalue for x, y in zip(a, b)])
  arms = [rng.normal(i * 0.3, 1, (5, 10)) for i in range(3)]
  np.testing.assert_allclose(card_stats.kruskal_p(arms),
                             [stats.kruskal(*(arm[i] for arm in arms)).pvalue for i in range(5)])
  assert card_stats.kruskal_p([[1.0, 1.0], [1.0, 1.0]]) == 1.0


def test_the_smallest_attainable_p():
  assert card_stats.smallest_p(4, 4) == pytest.approx(2 / 70)  # exact: 2 / C(8, 4)
  assert card_stats.possible_arrangements(4, 4) == 70
  assert card_stats.smallest_p(20, 20) < 1e-6


def test_benjamini_hochberg_by_its_definition():
  p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
  m = len(p)
  q = np.minimum.accumulate((p * m / np.arange(1, m + 1))[::-1])[::-1]
  np.testing.assert_allclose(card_stats.controlled(p), np.minimum(q, 1))
  assert card_stats.controlled([]) == []


def test_words_follow_the_q_values_and_the_column():
  c = {"shift": 0.2, "effect": 0.8, "q": 0.01, "q_equivalent": 0.5, "identical": False}
  assert card_stats.word(c) == "above"
  assert card_stats.word(dict(c, shift=-0.2)) == "below"
  assert card_stats.word(c, ranks=False) == "not resolved"  # a column that does not rank
  assert card_stats.word(dict(c, q=0.2, q_equivalent=0.01)) == "equivalent"
  assert card_stats.word(dict(c, identical=True)) == "identical"
  text = card_stats.phrase(dict(card_stats.compare([0.5, 0.6, 0.55], [0.5, 0.58, 0.52]), q=0.8,
                                q_equivalent=1.0), "softmax's 53.3%", "%", 100)
  assert text.startswith("not resolved against softmax's 53.3% with 3 seeds (shift ")
  assert "CI" in text and "q = 0.8" in text
  c = dict(card_stats.compare([0.6, 0.62, 0.61], [0.5, 0.51, 0.52], margin=0.005), q=0.01,
           q_equivalent=1.0)
  assert card_stats.phrase(c, "softmax's 51.0%", "%", 100).startswith(
      "above softmax's 51.0% (shift +")
