"""The sigmoid, sink, softpick, Scalable-Softmax, sparsemax, 1.5-entmax and stick-breaking weights
against numpy references of their papers' formulas, and the papers' properties."""
import functools
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from normattn_jax.attention import (entmax15_weights, sigmoid_weights, sink_weights,
                                    softmax_weights, softpick_weights, sparsemax_weights,
                                    ssmax_weights, stickbreaking_weights)

from helpers.examples import examples

ALL = {
    "sigmoid": sigmoid_weights,
    "sigmoid_bias": lambda l, mask=None: sigmoid_weights(l, -1.5, mask),
    "sink": sink_weights,
    "sink_per_head": lambda l, mask=None: sink_weights(l, HEAD_SINKS, mask),
    "softpick": softpick_weights,
    "ssmax": lambda l, mask=None: ssmax_weights(l, 0.7, mask),
    "sparsemax": sparsemax_weights,
    "entmax15": entmax15_weights,
    "stickbreaking": stickbreaking_weights,
}
HEAD_SINKS = np.linspace(-2.0, 2.0, 3).reshape(3, 1, 1)  # one sink per head of 3
SPARSE = {"sparsemax": sparsemax_weights, "entmax15": entmax15_weights}
SPARSE_JIT = {name: jax.jit(fn) for name, fn in SPARSE.items()}
SHAPE = (2, 3, 5, 7)


def random_logits(seed, shape, scale=3.0):
  return scale * jax.random.normal(jax.random.key(seed), shape)


def random_mask(seed, shape):
  return jax.random.bernoulli(jax.random.key(seed + 1000), 0.7, shape)


def make_mask(case, shape, seed=0):
  """None, a random mask, a random mask with fully masked rows, causal or strictly causal."""
  q, k = shape[-2:]
  if case == "none":
    return None
  if case == "random":
    return random_mask(seed, shape)
  if case == "empty_rows":
    return random_mask(seed, shape).at[0, 1, 2].set(False).at[1, 2].set(False)
  if case == "causal":
    return jnp.broadcast_to(jnp.tril(jnp.ones((q, k), bool), k - q), shape)
  if case == "strict_causal":  # the first query has no key: a fully masked row
    return jnp.broadcast_to(jnp.tril(jnp.ones((q, k), bool), k - q - 1), shape)
  raise ValueError(case)


MASKS = ["none", "random", "empty_rows", "causal", "strict_causal"]


# ----- numpy references, written from the papers' formulas (float64) -----

def rows(l, m):
  """(index, valid logits) for every row of ``l`` with at least one valid key."""
  for idx in np.ndindex(l.shape[:-1]):
    if m[idx].any():
      yield idx, l[idx][m[idx]]


def ref_sigmoid(l, m, bias=None):
  n = np.maximum(m.sum(-1, keepdims=True), 1)
  b = -np.log(n) if bias is None else bias
  return np.where(m, 1 / (1 + np.exp(-(l + b))), 0.0)


def ref_sink(l, m, sink=0.0):
  sink = np.broadcast_to(sink, l.shape[:-2] + (1, 1))
  out = np.zeros_like(l)
  for idx, x in rows(l, m):
    s = sink[idx[:-1]][0, 0]
    top = max(x.max(), s)
    out[idx][m[idx]] = np.exp(x - top) / (np.exp(s - top) + np.exp(x - top).sum())
  return out


def ref_softpick(l, m, eps=1e-6):
  out = np.zeros_like(l)
  for idx, x in rows(l, m):
    d = np.expm1(x)
    out[idx][m[idx]] = np.maximum(d, 0) / (np.abs(d).sum() + eps)
  return out


def ref_ssmax(l, m, s):
  out = np.zeros_like(l)
  for idx, x in rows(l, m):
    z = s * np.log(len(x)) * x
    e = np.exp(z - z.max())
    out[idx][m[idx]] = e / e.sum()
  return out


def threshold(z, power):
  """The tau with ``sum relu(z - tau)**power = 1`` by bisection (tau lies in [max - 1, max])."""
  lo, hi = z.max() - 1.0, z.max()
  for _ in range(200):
    mid = (lo + hi) / 2
    if (np.maximum(z - mid, 0) ** power).sum() > 1:
      lo = mid
    else:
      hi = mid
  return (lo + hi) / 2


def ref_sparsemax(l, m):
  out = np.zeros_like(l)
  for idx, x in rows(l, m):
    out[idx][m[idx]] = np.maximum(x - threshold(x, 1), 0)
  return out


def ref_entmax15(l, m):
  out = np.zeros_like(l)
  for idx, x in rows(l, m):
    z = x / 2  # the paper's (alpha - 1) z, alpha = 1.5
    out[idx][m[idx]] = np.maximum(z - threshold(z, 2), 0) ** 2
  return out


def ref_stickbreaking(l, m):
  b = 1 / (1 + np.exp(-l))
  out = np.zeros_like(l)
  for idx in np.ndindex(l.shape[:-1]):
    for j in range(l.shape[-1]):
      if m[idx][j]:
        later = [1 - b[idx][k] for k in range(j + 1, l.shape[-1]) if m[idx][k]]
        out[idx][j] = b[idx][j] * np.prod(later)
  return out


REFS = {
    "sigmoid": lambda l, m: ref_sigmoid(l, m),
    "sigmoid_bias": lambda l, m: ref_sigmoid(l, m, -1.5),
    "sink": lambda l, m: ref_sink(l, m),
    "sink_per_head": lambda l, m: ref_sink(l, m, HEAD_SINKS),
    "softpick": ref_softpick,
    "ssmax": lambda l, m: ref_ssmax(l, m, 0.7),
    "sparsemax": ref_sparsemax,
    "entmax15": ref_entmax15,
    "stickbreaking": ref_stickbreaking,
}


def as_np(l, mask):
  m = np.ones(l.shape, bool) if mask is None else np.asarray(jnp.broadcast_to(mask, l.shape))
  return np.asarray(l, np.float64), m


@pytest.mark.parametrize("case", MASKS)
@pytest.mark.parametrize("name", sorted(ALL))
def test_against_definitions(name, case):
  l = random_logits(0, SHAPE)
  mask = make_mask(case, SHAPE)
  ln, mn = as_np(l, mask)
  w = ALL[name](l, mask=mask)
  assert w.shape == l.shape and w.dtype == l.dtype
  np.testing.assert_allclose(w, REFS[name](ln, mn), atol=2e-6, rtol=1e-5)
  assert (np.asarray(w)[~mn] == 0).all()
  assert (np.asarray(w)[~mn.any(-1)] == 0).all()


@pytest.mark.parametrize("name", sorted(ALL))
def test_masks_broadcast(name):
  """A key-padding mask ``[..., 1, k]`` gives the weights of its broadcast full mask."""
  l = random_logits(1, SHAPE)
  keys = random_mask(1, SHAPE[:1] + (1, 1, SHAPE[-1]))
  chex.assert_trees_all_close(ALL[name](l, mask=keys),
                              ALL[name](l, mask=jnp.broadcast_to(keys, SHAPE)), atol=1e-7)


# ----- the papers' properties -----

@pytest.mark.parametrize("name", sorted(SPARSE))
def test_sparse_rows_sum_to_one_with_exact_zeros(name):
  l = random_logits(2, (4, 6, 16), scale=4.0)
  m = np.array(random_mask(2, (4, 6, 16)))
  m[0, 0] = False
  w = np.asarray(SPARSE_JIT[name](l, m))
  valid_rows = m.any(-1)
  np.testing.assert_allclose(w.sum(-1)[valid_rows], 1.0, atol=1e-5)
  assert (w.sum(-1)[~valid_rows] == 0).all()
  assert (w >= 0).all()
  assert ((w == 0) & m).sum() > 0.3 * m.sum()  # sparse: many exact zeros
  dense = np.asarray(jax.jit(softmax_weights)(l, m))
  assert ((dense == 0) & m).sum() == 0  # softmax gives none


def test_closed_form_cases():
  f = lambda fn, v: np.asarray(jax.jit(fn)(jnp.array([v], jnp.float32)))[0]  # not op by op
  np.testing.assert_allclose(f(sparsemax_weights, [0.0, 0.0]), [0.5, 0.5])
  np.testing.assert_array_equal(f(sparsemax_weights, [2.0, 0.0]), [1.0, 0.0])
  np.testing.assert_allclose(f(sparsemax_weights, [0.5, 0.0]), [0.75, 0.25])  # tau = -0.25
  np.testing.assert_allclose(f(sparsemax_weights, [1.0, 1.0, 1.0, -5.0]), [1 / 3] * 3 + [0])
  np.testing.assert_allclose(f(entmax15_weights, [1.3, 1.3]), [0.5, 0.5], atol=1e-7)
  np.testing.assert_allclose(f(entmax15_weights, [0.0, 0.0, 0.0, 0.0]), [0.25] * 4, atol=1e-7)
  np.testing.assert_array_equal(f(entmax15_weights, [2.0, 0.0]), [1.0, 0.0])  # z/2 1 apart
  # two keys, z/2 = [d/2, 0]: (d/2 - tau)^2 + tau^2 = 1 gives w_1 = ((d/2 + sqrt(2 - d^2/4))/2)^2
  d = 1.0
  np.testing.assert_allclose(f(entmax15_weights, [d, 0.0])[0],
                             ((d / 2 + np.sqrt(2 - d * d / 4)) / 2) ** 2, rtol=1e-6)
  np.testing.assert_allclose(f(sink_weights, [0.0]), [0.5])  # softmax_1: 1 / (1 + 1)
  np.testing.assert_allclose(f(softpick_weights, [np.log(3.0), -1.0]),
                             [2 / (2 + 1 - np.exp(-1) + 1e-6), 0.0], rtol=1e-6)
  np.testing.assert_allclose(f(stickbreaking_weights, [0.0, 0.0, 0.0]), [0.125, 0.25, 0.5])
  np.testing.assert_allclose(f(sigmoid_weights, [0.0, 0.0, 0.0, 0.0]), [0.2] * 4, rtol=1e-6)
  np.testing.assert_allclose(f(ssmax_weights, [1.0, 0.0]), [2 / 3, 1 / 3], rtol=1e-6)  # 2^l


def test_sink_interpolates_softmax_and_softmax_one():
  l = random_logits(3, SHAPE)
  m = make_mask("empty_rows", SHAPE)
  chex.assert_trees_all_close(sink_weights(l, -1e4, m), softmax_weights(l, m), atol=1e-7)
  chex.assert_trees_all_close(sink_weights(l, -jnp.inf, m), softmax_weights(l, m), atol=1e-7)
  sums = np.asarray(sink_weights(l, 0.0, m).sum(-1))
  valid = np.asarray(m).any(-1)
  assert (sums < 1).all() and (sums[valid] > 0).all()
  ln, mn = as_np(l, m)  # softmax_1 = softmax over the logits and an extra 0
  ext = np.concatenate([ln, np.zeros(ln.shape[:-1] + (1,))], -1)
  extm = np.concatenate([mn, np.ones(mn.shape[:-1] + (1,), bool)], -1)
  e = np.where(extm, np.exp(ext - ext.max(-1, keepdims=True)), 0)
  np.testing.assert_allclose(sink_weights(l, 0.0, m), (e / e.sum(-1, keepdims=True))[..., :-1],
                             atol=1e-6)
  # a larger sink takes more of the row
  assert (np.asarray(sink_weights(l, 2.0, m).sum(-1)) <= sums + 1e-7).all()


def test_ssmax_with_scale_one_over_log_n_is_softmax():
  l = random_logits(4, SHAPE)
  k = SHAPE[-1]
  chex.assert_trees_all_close(ssmax_weights(l, 1 / np.log(k)), softmax_weights(l), atol=1e-6)
  # a per-head scale; rows with the same number of valid keys (a key-padding mask)
  keys = jnp.array([True] * 4 + [False] * 3)
  scale = (1 / np.log(4)) * jnp.ones((SHAPE[1], 1, 1))
  chex.assert_trees_all_close(ssmax_weights(l, scale, keys), softmax_weights(l, keys), atol=1e-6)


def test_ssmax_top_weight_does_not_fade_with_length():
  """With softmax the weight of one key 2 logits above the rest fades as n grows; with SSMax
  (scale 1) the top weight n^2 / (n^2 + n - 1) grows towards 1."""
  ssmax = jax.jit(ssmax_weights)  # one program per length, not one per op
  for n in (8, 64, 512):
    l = np.zeros((1, n), np.float32)
    l[0, 0] = 2.0
    np.testing.assert_allclose(ssmax(l)[0, 0], n * n / (n * n + n - 1), rtol=1e-5)
  assert float(jax.jit(softmax_weights)(l)[0, 0]) < 0.02


def test_sigmoid_has_no_row_coupling():
  l = random_logits(5, (3, 6))
  moved = np.array(l)
  moved[1, 2] += 3.0
  for bias in (None, 0.4):

    @jax.jit  # one program, not one per op
    def weights_and_jacobian(l, moved):
      jac = jax.jacobian(lambda x: sigmoid_weights(x[None], bias)[0])(l[0])
      return sigmoid_weights(l, bias), sigmoid_weights(moved, bias), jac
    w, w2, jac = map(np.asarray, weights_and_jacobian(l, moved))
    changed = w != w2
    assert changed[1, 2] and changed.sum() == 1
    np.testing.assert_array_equal(jac, np.diag(np.diag(jac)))


def test_sigmoid_default_bias_is_minus_log_n():
  l = random_logits(6, SHAPE)
  m = make_mask("random", SHAPE)
  n = jnp.maximum(m.sum(-1, keepdims=True), 1)
  chex.assert_trees_all_close(sigmoid_weights(l, mask=m),
                              jnp.where(m, jax.nn.sigmoid(l - jnp.log(n)), 0.0), atol=1e-7)
  per_head = jnp.array([0.0, -1.0, 2.0]).reshape(3, 1, 1)
  chex.assert_trees_all_close(sigmoid_weights(l, per_head, m),
                              jnp.where(m, jax.nn.sigmoid(l + per_head), 0.0), atol=1e-7)


def test_softpick_zeroes_non_positive_logits_and_rows_sum_at_most_one():
  l = random_logits(7, SHAPE)
  m = make_mask("empty_rows", SHAPE)
  w = np.asarray(softpick_weights(l, m))
  assert (w[np.asarray(l) <= 0] == 0).all()
  assert (w[(np.asarray(l) > 0) & np.asarray(m)] > 0).all()
  assert (w.sum(-1) <= 1 + 1e-6).all()
  neg = softpick_weights(-jnp.abs(l), m)  # no positive logit: an all-zero row, no sink needed
  assert (neg == 0).all()


@pytest.mark.parametrize("case", ["none", "random", "strict_causal"])
def test_stickbreaking_rows_sum_to_one_minus_the_remaining_stick(case):
  l = random_logits(8, SHAPE)
  m = make_mask(case, SHAPE)
  ln, mn = as_np(l, m)
  w = np.asarray(stickbreaking_weights(l, m))
  left = np.prod(np.where(mn, 1 / (1 + np.exp(ln)), 1.0), -1)  # prod (1 - sigmoid(l))
  np.testing.assert_allclose(w.sum(-1), 1 - left, atol=1e-6)
  assert (w.sum(-1) <= 1 + 1e-6).all() and (w >= 0).all()


def test_stickbreaking_prefers_the_nearest_key_and_is_stable_for_long_rows():
  stickbreaking = jax.jit(stickbreaking_weights)  # one program per shape, not one per op
  w = stickbreaking(np.full((1, 6), 5.0, np.float32))  # equal logits: the nearest key wins
  assert (np.diff(np.asarray(w[0])) > 0).all()
  l = random_logits(9, (2, 4096), scale=2.0) + 1.0
  got = stickbreaking(l)
  ln = np.asarray(l, np.float64)
  later = np.cumsum(np.log1p(np.exp(ln))[:, ::-1], -1)[:, ::-1] - np.log1p(np.exp(ln))
  want = np.exp(-np.log1p(np.exp(-ln)) - later)  # the product formula in float64 logs
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-30)
  grad = jax.jit(jax.grad(lambda x: stickbreaking_weights(x)[:, -50:].sum()))(l)
  assert np.isfinite(np.asarray(grad)).all()


# ----- gradients -----

def fd_vjp(ref, l, m, g, h=1e-6):
  """``g . d ref / d l`` by central finite differences in float64. Each weight depends on its
  own row's logits alone, so one key position is moved in every row at once: each row's
  difference is the one that moving that entry alone gives."""
  out = np.zeros_like(l)
  for j in range(l.shape[-1]):
    e = np.zeros_like(l)
    e[..., j] = h
    out[..., j] = (g * (ref(l + e, m) - ref(l - e, m))).sum(-1) / (2 * h)
  return np.where(m, out, 0.0)


@pytest.mark.parametrize("case", ["none", "empty_rows", "causal"])
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["case"] == "empty_rows" or p["name"] == "stickbreaking")
def test_gradients_match_finite_differences(name, case):
  shape = (2, 3, 4, 6)
  l = random_logits(10, shape, scale=1.5)
  mask = make_mask(case, shape, seed=10)
  g = random_logits(11, shape, scale=1.0)
  ln, mn = as_np(l, mask)

  @jax.jit  # one program, not one per op
  def pullback(l, mask, g):
    return jax.vjp(lambda x: ALL[name](x, mask=mask), l)[1](g)[0]
  got = pullback(l, mask, g)
  want = fd_vjp(REFS[name], ln, mn, np.asarray(g, np.float64))
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
  assert (np.asarray(got)[~mn] == 0).all()


def test_sparse_custom_gradients_are_the_closed_forms():
  l = random_logits(12, (3, 5, 9), scale=2.0)
  m = random_mask(12, (3, 5, 9))
  g = random_logits(13, (3, 5, 9), scale=1.0)

  @jax.jit  # one program, not one per op
  def sparsemax_and_closed_form(l, m, g):
    w, vjp = jax.vjp(lambda x: sparsemax_weights(x, m), l)
    s = w > 0
    mean = jnp.sum(jnp.where(s, g, 0), -1, keepdims=True) / jnp.sum(s, -1, keepdims=True)
    # autodiff of the support-restricted closed form w = l - (sum_S l - 1) / |S| on S
    closed = lambda x: jnp.where(s, x - (jnp.sum(jnp.where(s, x, 0), -1, keepdims=True) - 1)
                                 / jnp.sum(s, -1, keepdims=True), 0.0)
    return (w, vjp(g)[0], jnp.where(s, g - mean, 0.0), closed(l),
            jax.vjp(closed, l)[1](g)[0])
  w, pullback, want, closed, closed_pullback = sparsemax_and_closed_form(l, m, g)
  chex.assert_trees_all_close(pullback, want, atol=1e-6)
  chex.assert_trees_all_close(closed, w, atol=1e-5)  # the closed form agrees
  chex.assert_trees_all_close(closed_pullback, pullback, atol=1e-6)

  @jax.jit
  def entmax15_and_closed_form(l, m, g):
    w, vjp = jax.vjp(lambda x: entmax15_weights(x, m), l)
    r = jnp.sqrt(w)
    return vjp(g)[0], r * g - jnp.sum(r * g, -1, keepdims=True) / jnp.sum(r, -1, keepdims=True) * r
  pullback, want = entmax15_and_closed_form(l, m, g)
  chex.assert_trees_all_close(pullback, want, atol=1e-6)
  # the weights' sum stays 1: the gradient of the row sum is 0
  for fn in SPARSE.values():
    grad = jax.jit(jax.grad(lambda x: fn(x, m).sum()))(l)
    np.testing.assert_allclose(grad, 0.0, atol=1e-6)


@settings(max_examples=examples(10), deadline=None)
@given(k=st.integers(1, 12), scale=st.floats(0.1, 20.0), seed=st.integers(0, 2**16))
def test_sparse_weights_match_bisection(k, scale, seed):
  """k valid keys at most, padded to 12 (one compiled shape)."""
  l = random_logits(seed, (3, 12), scale)
  m = random_mask(seed, (3, 12)) & (jnp.arange(12) < k)
  ln, mn = as_np(l, m)
  np.testing.assert_allclose(SPARSE_JIT["sparsemax"](l, m), ref_sparsemax(ln, mn), atol=1e-5)
  np.testing.assert_allclose(SPARSE_JIT["entmax15"](l, m), ref_entmax15(ln, mn), atol=1e-5)


# ----- no NaN: fully masked rows, huge logits, bf16 -----

@functools.cache
def weights_and_grad(name):
  """``(weights, gradient of their sum of squares)`` of ``ALL[name]`` at ``(logits, mask)``, one
  program per mask kind and shape, not one per op."""
  fn = ALL[name]
  return jax.jit(lambda l, m: (fn(l, mask=m), jax.grad(lambda x: jnp.sum(fn(x, mask=m) ** 2))(l)))


# every weight function sets the masked logits to 0 first (weights._prepare): one with a
# parameter, one with a sort and a custom gradient, stick-breaking's sums; each one's rows
# without a key: test_against_definitions[*-empty_rows], their gradients:
# test_gradients_match_finite_differences[*-empty_rows]
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["name"] in ("sink_per_head", "entmax15", "stickbreaking"))
def test_fully_masked_rows_are_zero_with_finite_gradients(name):
  l = random_logits(14, SHAPE)
  m = np.asarray(make_mask("empty_rows", SHAPE))
  w, grad = map(np.asarray, weights_and_grad(name)(l, m))
  assert (w[~m] == 0).all() and (w[0, 1, 2] == 0).all() and (w[1, 2] == 0).all()
  assert np.isfinite(grad).all() and (grad[~m] == 0).all()
  # masked logits may hold -inf (or anything): they are never read
  poisoned = np.where(m, l, -np.inf).astype(np.float32)
  poisoned_w, poisoned_grad = weights_and_grad(name)(poisoned, m)
  chex.assert_trees_all_close(poisoned_w, w, atol=0)
  assert np.isfinite(poisoned_grad).all()


@pytest.mark.parametrize("scale", [1e4, 1e30, 1e38])
@pytest.mark.parametrize("name", sorted(ALL))
def test_huge_logits(name, scale):
  l = random_logits(15, SHAPE, scale=1.0) * scale
  m = np.asarray(make_mask("empty_rows", SHAPE))
  for mask in (None, m):
    w, grad = map(np.asarray, weights_and_grad(name)(l, mask))
    assert np.isfinite(w).all() and (w >= 0).all()
    if not name.startswith("sigmoid"):  # sigmoid weights are not coupled across the row
      assert (w.sum(-1) <= 1 + 1e-5).all()
    assert np.isfinite(grad).all()
  if name in ("sink", "softpick", "ssmax", "sparsemax", "entmax15"):
    # the row's largest logit takes all the weight (for sink and softpick: if it is positive;
    # a row of negative huge logits gives all to the sink, or nothing with softpick)
    ln, mn = as_np(l, m)
    top = np.where(mn, ln, -np.inf).argmax(-1)  # w: the weights with the mask m
    picked = np.take_along_axis(w, top[..., None], -1)[..., 0]
    top_logit = np.take_along_axis(ln, top[..., None], -1)[..., 0]
    rows = mn.any(-1)
    if name in ("sink", "softpick"):
      np.testing.assert_allclose(w[rows & (top_logit < -50)], 0.0, atol=1e-6)
      rows &= top_logit > 50
    np.testing.assert_allclose(picked[rows], 1.0, atol=1e-6)


def test_huge_ties_split_evenly():
  l = np.array([[1e30, 1e30, -1e30, 0.0], [3e38, 3e38, -3e38, 3e38]], np.float32)
  for fn in (sparsemax_weights, entmax15_weights, softmax_weights, ssmax_weights):
    np.testing.assert_allclose(jax.jit(fn)(l), [[0.5, 0.5, 0, 0], [1 / 3, 1 / 3, 0, 1 / 3]],
                               atol=1e-6)  # one program each, not one per op


# bf16 weights and gradients: one with a parameter (the sink's), one with a sort and a custom
# gradient (entmax15), stick-breaking's log-space sums
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["name"] in ("sink_per_head", "entmax15", "stickbreaking"))
def test_bf16(name):
  fn = ALL[name]
  l = random_logits(16, SHAPE)
  m = make_mask("empty_rows", SHAPE)

  @jax.jit  # one program, not one per op
  def in_bf16(l, m):
    low = fn(l.astype(jnp.bfloat16), mask=m)
    ref = fn(l.astype(jnp.bfloat16).astype(jnp.float32), mask=m)
    grad = jax.grad(lambda x: jnp.sum(fn(x, mask=m).astype(jnp.float32) ** 2))(
        l.astype(jnp.bfloat16))
    return low, ref, grad, fn((l * 1e30).astype(jnp.bfloat16), mask=m)
  low, ref, grad, huge = in_bf16(l, m)
  assert low.dtype == jnp.bfloat16
  low = np.asarray(low.astype(jnp.float32))
  assert np.isfinite(low).all()
  np.testing.assert_allclose(low, ref, rtol=2e-2, atol=2e-2)
  assert grad.dtype == jnp.bfloat16 and np.isfinite(np.asarray(grad.astype(jnp.float32))).all()
  assert np.isfinite(np.asarray(huge.astype(jnp.float32))).all()


# one with a per-head parameter (the sink's) and one with a sort and a custom gradient
# (sparsemax); the weight functions are row-local jax code alike
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["name"] in ("sink_per_head", "sparsemax"))
def test_jit_and_vmap(name):
  fn = ALL[name]
  l = random_logits(17, (2, 3, 4, 5))
  m = random_mask(17, (2, 3, 4, 5))
  want = fn(l, mask=m)  # op by op
  chex.assert_trees_all_close(jax.jit(fn)(l, mask=m), want, atol=1e-6)
  chex.assert_trees_all_close(jax.jit(jax.vmap(lambda x, y: fn(x, mask=y)))(l, m), want,
                              atol=1e-6)


# ----- arguments -----

@pytest.mark.parametrize("name", sorted(ALL))
def test_integer_and_empty_logits_are_refused(name):
  with pytest.raises(TypeError, match="floating point, got dtype int32"):
    ALL[name](jnp.arange(6, dtype=jnp.int32).reshape(2, 3))
  for shape in ((2, 0, 3), (2, 3, 0)):
    with pytest.raises(ValueError, match=re.escape(f"got shape {shape}")):
      ALL[name](jnp.zeros(shape))


def test_bad_arguments_name_the_argument():
  l = jnp.zeros((2, 4, 4))
  with pytest.raises(ValueError, match="bias of shape"):
    sigmoid_weights(l, jnp.ones((3,)))
  with pytest.raises(ValueError, match="sink of shape"):
    sink_weights(l, jnp.ones((4, 1, 1)))
  with pytest.raises(ValueError, match="scale of shape"):
    ssmax_weights(l, jnp.ones((2, 4, 4)))
  with pytest.raises(ValueError, match="eps must be >= 0"):
    softpick_weights(l, eps=-1e-3)
  for fn in (sparsemax_weights, entmax15_weights, stickbreaking_weights):
    with pytest.raises(ValueError, match="mask of shape"):
      fn(l, jnp.ones((3, 4), bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
      fn(l, jnp.ones((4, 4)))
