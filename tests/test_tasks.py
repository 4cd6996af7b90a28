"""The synthetic tasks: statistics and tie rules."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.tasks import (balanced_case_set, case_distinction, case_labels, majority,
                                mode_finding, mode_labels, synthetic)


def test_case_frequencies_match_the_paper():
  batch = case_distinction(jax.random.key(0), 100_000, 128, 100)
  freq = np.bincount(np.asarray(batch.cases), minlength=3) / 100_000
  # closed form: P(64) = 1 - 0.99^128, P(50 and no 64), P(neither) = 0.98^128
  expected = [1 - 0.99 ** 128, 0.99 ** 128 - 0.98 ** 128, 0.98 ** 128]
  np.testing.assert_allclose(freq, expected, atol=0.005)
  np.testing.assert_allclose(freq, [0.724, 0.201, 0.075], atol=0.006)  # the paper's numbers
  np.testing.assert_allclose(synthetic.case_shares(128, 100), expected, rtol=1e-12)
  np.testing.assert_allclose(synthetic.case_shares(32, 100), [0.2750, 0.2011, 0.5239], atol=1e-4)
  assert batch.inputs.dtype == jnp.int32 and batch.labels.dtype == jnp.int32


def test_case_labels_and_ties_go_to_the_first_occurrence():
  x = jnp.array([
      [70, 3, 64, 3, 90],    # argmin; the smallest value 3 occurs twice -> position 1
      [70, 99, 50, 99, 1],   # first (a 50, no 64) -> position 0
      [70, 99, 12, 99, 1],   # argmax; 99 twice -> position 1
      [64, 50, 99, 0, 0],    # 64 wins over 50: argmin -> position 3
  ])
  batch = case_labels(x)
  np.testing.assert_array_equal(batch.labels, [1, 0, 1, 3])
  np.testing.assert_array_equal(batch.cases, [0, 1, 2, 0])
  np.testing.assert_array_equal(batch.labels, [
      np.argmin(r) if 64 in r else (0 if 50 in r else np.argmax(r)) for r in np.asarray(x)])


def test_mode_ties_go_to_the_smallest_token():
  x = jnp.array([[3, 1, 3, 1, 2], [0, 4, 4, 2, 2], [5, 5, 5, 1, 1]])
  np.testing.assert_array_equal(mode_labels(x, 10), [1, 2, 5])
  inputs, labels = mode_finding(jax.random.key(1), 512, 20, 10)
  for row, label in zip(np.asarray(inputs), np.asarray(labels)):
    c = np.bincount(row, minlength=10)
    assert label == np.flatnonzero(c == c.max())[0]


def test_the_best_blind_guess_on_the_mode_task_is_counted_exactly():
  """``mode_guess_rate`` is the share of sequences whose mode is 0: every sequence of a small
  task enumerated, and the generator's labels at N = 32."""
  for n, s in ((6, 3), (5, 4), (7, 2)):
    every = np.array(np.meshgrid(*[np.arange(s)] * n, indexing="ij")).reshape(n, -1).T
    counts = np.stack([np.sum(every == v, axis=1) for v in range(s)], axis=1)
    share = np.mean(counts.argmax(axis=1) == 0)  # argmax: the smallest token wins a tie
    assert synthetic.mode_guess_rate(n, s) == pytest.approx(share, rel=1e-12)
  _, labels = mode_finding(jax.random.key(3), 20_000, 32, 16)
  rate = synthetic.mode_guess_rate(32, 16)
  assert abs(np.mean(np.asarray(labels) == 0) - rate) < 4 * (rate * (1 - rate) / 20_000) ** 0.5
  assert np.bincount(np.asarray(labels)).argmax() == 0  # 0 wins the ties: the best guess


def test_balanced_case_set():
  batch = balanced_case_set(jax.random.key(2), 300, 64, 100)
  cases = np.asarray(batch.cases)
  np.testing.assert_array_equal(np.bincount(cases), [300, 300, 300])
  np.testing.assert_array_equal(cases, np.repeat([0, 1, 2], 300))  # forced as intended
  inputs = np.asarray(batch.inputs)
  assert (inputs[300:] != 64).all() and (inputs[600:] != 50).all()
  assert inputs.min() >= 0 and inputs.max() < 100


def test_vocab_too_small_for_the_case_task():
  with pytest.raises(ValueError, match="vocab_size"):
    case_distinction(jax.random.key(0), 2, 8, vocab_size=50)


@pytest.mark.parametrize("margin", [0, 6])
def test_majority_labels_every_position_with_the_leading_type(margin):
  inputs, labels = majority(jax.random.key(3), 500, 50, 20, min_margin=margin)
  assert inputs.shape == labels.shape == (500, 50)
  inputs, labels = np.asarray(inputs), np.asarray(labels)
  counts = np.stack([np.bincount(row, minlength=20) for row in inputs])
  top = np.sort(counts, axis=1)
  assert (labels == labels[:, :1]).all()
  np.testing.assert_array_equal(labels[:, 0], np.argmax(counts, axis=1))
  assert (top[:, -1] - top[:, -2]).min() >= margin
  if margin == 0:  # untouched uniform data: some rows are close races
    assert (top[:, -1] - top[:, -2]).min() <= 1


def test_majority_margin_is_checked():
  with pytest.raises(ValueError, match="min_margin"):
    majority(jax.random.key(0), 2, 5, min_margin=6)
