"""Each weight function against its paper's definition and theorems."""
import functools
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.spatial import Delaunay

from normattn_jax.attention import (dnas_weights, hnas_weights, nap_weights, non_weights,
                                    sinkhorn_weights, softmax_weights)

from helpers.examples import examples

ALL = {
    "softmax": softmax_weights,
    "dnas": dnas_weights,
    "hnas": lambda l, mask=None: hnas_weights(l, 0.3, mask),
    "sinkhorn": lambda l, mask=None: sinkhorn_weights(l, 4, mask),
    "nap": lambda l, mask=None: nap_weights(l, 1.5, 0.2, mask),
    "non": non_weights,
}


@functools.partial(jax.jit, static_argnums=1)
def random_logits(seed, shape, scale=3.0):
  return scale * jax.random.normal(jax.random.key(seed), shape)


@functools.partial(jax.jit, static_argnums=1)
def random_mask(seed, shape):
  return jax.random.bernoulli(jax.random.key(seed + 1000), 0.7, shape)


# ----- numpy references, written from the papers' definitions -----

def ref_softmax(l, m):
  e = np.where(m, np.exp(l - l.max(-1, keepdims=True)), 0.0)
  s = e.sum(-1, keepdims=True)
  return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def ref_sinkhorn(l, m, iters):
  p = np.where(m, np.exp(l - l.max()), 0.0)  # pi^0 = exp(q.k), Eq. 10
  for _ in range(iters):
    c = p.sum(-2, keepdims=True)
    p = np.divide(p, c, out=np.zeros_like(p), where=c > 0)
    r = p.sum(-1, keepdims=True)
    p = np.divide(p, r, out=np.zeros_like(p), where=r > 0)
  return p


def ref_nap(l, m, g, b, eps):
  out = np.zeros_like(l)
  for idx in np.ndindex(l.shape[:-1]):
    v = m[idx]
    if v.any():
      x = l[idx][v]
      out[idx][v] = g * (x - x.mean()) / (x.std() + eps) + b  # population std
  return out


def ref_non(l, m):
  n = m.sum(-1, keepdims=True)
  return np.where(m, l / np.sqrt(np.maximum(n, 1)), 0.0)


@pytest.mark.parametrize("masked", [False, True])
def test_against_definitions(masked):
  shape = (2, 3, 7, 9)
  l = random_logits(0, shape)
  m = random_mask(0, shape) if masked else jnp.ones(shape, bool)
  mask = m if masked else None
  ln, mn = np.asarray(l, np.float64), np.asarray(m)
  u = 0.3

  @jax.jit  # one program, not one per op
  def weights(l, mask):
    return (softmax_weights(l, mask), dnas_weights(l, mask), sinkhorn_weights(l, 5, mask),
            nap_weights(l, 1.5, -0.3, mask), nap_weights(l, mask=mask, eps=1e-12),
            non_weights(l, mask), hnas_weights(l, u, mask))
  softmax, dnas, sinkhorn, nap, nap_tiny_eps, non, hnas = weights(l, mask)
  np.testing.assert_allclose(softmax, ref_softmax(ln, mn), atol=1e-6)
  np.testing.assert_allclose(dnas, ref_sinkhorn(ln, mn, 1), atol=1e-6)
  np.testing.assert_allclose(sinkhorn, ref_sinkhorn(ln, mn, 5), atol=1e-5)
  np.testing.assert_allclose(nap, ref_nap(ln, mn, 1.5, -0.3, 1e-3), atol=1e-5)
  np.testing.assert_allclose(nap_tiny_eps, ref_nap(ln, mn, 1.0, 0.0, 1e-12), atol=1e-5)
  np.testing.assert_allclose(non, ref_non(ln, mn), atol=1e-6)
  np.testing.assert_allclose(hnas, u * ref_sinkhorn(ln, mn, 1) + (1 - u) * ref_softmax(ln, mn),
                             atol=1e-6)


jitted_dnas = jax.jit(dnas_weights)  # one program per shape, not op by op


def test_dnas_is_softmax_over_queries_then_renormalised_over_keys():
  l = random_logits(1, (5, 6))
  e = np.exp(np.asarray(l, np.float64))
  xi = e / e.sum(0)  # Eq. 5: xi_ij = exp(q_i.k_j) / sum_i exp(q_i.k_j)
  np.testing.assert_allclose(jitted_dnas(l), xi / xi.sum(-1, keepdims=True), atol=1e-6)


# The properties draw values freely and shapes from a few sizes, so that each shape compiles once.
SIZES = st.sampled_from([1, 2, 5, 12])


@settings(max_examples=examples(30), deadline=None)
@given(q=SIZES, k=SIZES, scale=st.floats(0.1, 30.0), seed=st.integers(0, 2**16))
def test_dnas_column_sums_at_least_one_over_s(q, k, scale, seed):
  """Theorem 2: every key keeps a total weight >= 1/S over the queries (S = number of keys)."""
  logits = scale * np.random.default_rng(seed).standard_normal((q, k), np.float32)
  w = np.asarray(jitted_dnas(logits))
  assert float(w.sum(0).min()) >= 1.0 / k - 1e-6


@settings(max_examples=examples(20), deadline=None)
@given(q=SIZES.filter(lambda n: n > 1), k=SIZES.filter(lambda n: n > 1),
       seed=st.integers(0, 2**16))
def test_dnas_column_bound_with_padding(q, k, seed):
  """With padding, the bound holds with S = number of valid keys, for every valid key."""
  rng = np.random.default_rng(seed)
  valid_q, valid_k = rng.random(q) < 0.7, rng.random(k) < 0.7
  valid_q[0] = valid_k[0] = True
  mask = valid_q[:, None] & valid_k[None, :]
  w = jitted_dnas(3.0 * rng.standard_normal((q, k), np.float32), mask)
  cols = np.asarray(w.sum(0))[valid_k]
  assert cols.min() >= 1.0 / int(valid_k.sum()) - 1e-6


def test_sinkhorn_converges_to_doubly_stochastic():
  l = random_logits(2, (3, 8, 8), scale=1.0)
  errors = []
  for iters in (1, 4, 16, 64):  # op by op: the iterations reuse one program per op
    w = np.asarray(sinkhorn_weights(l, iters))
    errors.append(float(np.max(np.abs(w.sum(-2) - 1))))
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)  # the last step normalises rows
  assert errors == sorted(errors, reverse=True)
  assert errors[-1] < 1e-4 < errors[0]


def test_sinkhorn_one_iteration_is_dnas():
  l = random_logits(3, (2, 5, 7))
  m = random_mask(3, (2, 5, 7))
  sinkhorn = jax.jit(lambda l, m: sinkhorn_weights(l, 1, m))  # a program each, not op by op
  chex.assert_trees_all_close(sinkhorn(l, m), jitted_dnas(l, m), atol=1e-7)


def test_hnas_endpoints_are_unas_and_dnas():
  l = random_logits(4, (2, 4, 6, 6))
  m = random_mask(4, (2, 4, 6, 6))
  hnas = jax.jit(lambda l, m, u: hnas_weights(l, u, m))  # a program each, not op by op
  softmax, dnas = jax.jit(softmax_weights)(l, m), jitted_dnas(l, m)
  chex.assert_trees_all_close(hnas(l, m, 0.0), softmax, atol=1e-7)
  chex.assert_trees_all_close(hnas(l, m, 1.0), dnas, atol=1e-7)
  u = np.array([0.0, 0.25, 0.5, 1.0], np.float32).reshape(4, 1, 1)  # one u per head
  w = hnas(l, m, u)
  chex.assert_trees_all_close(w[:, 0], softmax[:, 0], atol=1e-7)
  chex.assert_trees_all_close(w[:, 3], dnas[:, 3], atol=1e-7)


jitted_nap = jax.jit(nap_weights)  # one program per shape, not op by op


def test_softmax_outputs_lie_in_the_convex_hull_of_the_values():
  values = np.asarray(random_logits(5, (12, 2), 1.0))
  outputs = np.asarray(jax.jit(softmax_weights)(random_logits(6, (40, 12)))) @ values
  assert (Delaunay(values).find_simplex(outputs) >= 0).all()
  # NAP's weights leave the hull: the probability cage is gone
  nap_out = np.asarray(jitted_nap(random_logits(6, (40, 12)))) @ values
  assert (Delaunay(values).find_simplex(nap_out) < 0).any()


def test_nap_represents_xor():
  """Lemma 2: with l = [3 x1 + 1, 2 x2], normalised weighting of (x1, x2) is XOR(x1, x2)."""

  @jax.jit  # one program for the four inputs, not one per op
  def weighted(logits, x):
    exact = nap_weights(logits[None], eps=1e-12)[0] @ x  # eps > 0, below float32 rounding
    smoothed = nap_weights(logits[None])[0] @ x  # the default epsilon barely moves it
    return exact, smoothed

  for x1 in (0, 1):
    for x2 in (0, 1):
      x = np.array([x1, x2], np.float32)
      exact, smoothed = weighted(np.array([3 * x1 + 1, 2 * x2], np.float32), x)
      assert float(exact) == float(x1 != x2)
      assert abs(float(smoothed) - float(x1 != x2)) < 2e-3


def test_nap_and_non_are_length_independent_at_init():
  """NAP weights have zero mean and unit std per query; NON's l/sqrt(n) keeps o's scale."""
  w = np.asarray(jax.jit(lambda l: nap_weights(l, eps=1e-12))(random_logits(7, (4, 100))))
  np.testing.assert_allclose(w.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(w.std(-1), 1.0, atol=1e-5)


# HNAS's and Sinkhorn's masked and empty rows, values and gradients:
# test_weights_exact.py::test_quadratic_weights_equal_the_definition_at_any_finite_logits and
# test_gradients_stay_finite_at_any_finite_logits
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["name"] not in ("hnas", "sinkhorn"))
def test_masked_positions_are_exactly_zero_and_full_rows_are_safe(name):
  fn = ALL[name]
  l = random_logits(8, (2, 6, 6))
  m = np.array(random_mask(8, (2, 6, 6)))
  m[0, 2, :] = m[1] = False

  @jax.jit  # one program, not one per op
  def weights_and_grad(l, m):
    return fn(l, mask=m), jax.grad(lambda x: jnp.sum(fn(x, mask=m) ** 2))(l)
  w, grad = map(np.asarray, weights_and_grad(l, m))
  assert not np.isnan(w).any()
  assert (w[~m] == 0).all()
  assert (w[0, 2] == 0).all() and (w[1] == 0).all()
  assert np.isfinite(grad).all()
  assert (grad[~m] == 0).all()


# bf16 weights: softmax (row-local), DNAS (over the queries), NAP; HNAS's and Sinkhorn's huge
# logits: test_weights_exact.py, NON's l / sqrt(n): test_against_definitions
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["name"] in ("softmax", "dnas", "nap"))
def test_huge_logits_and_bf16(name):
  fn = ALL[name]

  @jax.jit  # one program, not one per op
  def huge_and_low(huge, l, m):
    low = fn(l.astype(jnp.bfloat16), mask=m)
    ref = fn(l.astype(jnp.bfloat16).astype(jnp.float32), mask=m)
    return fn(huge), jax.grad(lambda x: jnp.sum(fn(x)))(huge), low, ref

  huge = random_logits(9, (2, 5, 8), scale=1e4)
  l = random_logits(10, (2, 5, 8))
  m = random_mask(10, (2, 5, 8))
  w, grad, low, ref = huge_and_low(huge, l, m)
  assert np.isfinite(w).all()
  assert np.isfinite(grad).all()
  assert low.dtype == jnp.bfloat16
  low = np.asarray(low.astype(jnp.float32))
  assert np.isfinite(low).all()
  np.testing.assert_allclose(low, ref, rtol=2e-2, atol=2e-2)


nap_cube_grad = jax.jit(jax.grad(lambda x, m: jnp.sum(nap_weights(x, mask=m) ** 3)))


@pytest.mark.parametrize("scale", [1e19, 1e30, 1e37])
def test_nap_is_exact_for_any_finite_logits(scale):
  """NAP equals its float64 definition at any scale: the squares of huge centred logits and the
  mean of logits near the float32 maximum must not overflow."""
  shape = (2, 5, 7)
  l = random_logits(12, shape, scale=1.0) * scale
  m = np.array(random_mask(12, shape))
  m[0, 1] = False
  ref = ref_nap(np.asarray(l, np.float64), m, 1.5, 0.2, 1e-3)
  np.testing.assert_allclose(jitted_nap(l, 1.5, 0.2, m), ref, atol=1e-5)
  assert np.isfinite(nap_cube_grad(l, m)).all()
  top = np.array([[3.3e38, 3.3e38, -3.3e38], [3.3e38] * 3, [-1e38, 2e38, 3e38]], np.float32)
  ref = ref_nap(np.asarray(top, np.float64), np.ones(top.shape, bool), 1.0, 0.5, 1e-3)
  np.testing.assert_allclose(jitted_nap(top, bias=0.5), ref, atol=1e-6)
  assert (np.asarray(jitted_nap(top, bias=0.5))[1] == 0.5).all()  # equal logits: exactly the bias


def test_nap_eps_must_be_positive():
  for eps in (0.0, -1e-3, float("nan")):
    with pytest.raises(ValueError, match=f"eps must be > 0.*{eps}"):
      nap_weights(jnp.ones((2, 3)), eps=eps)


@pytest.mark.parametrize("name", sorted(ALL))
def test_integer_logits_are_refused(name):
  """Integer logits would give integer (truncated to 0) weights."""
  with pytest.raises(TypeError, match="floating point, got dtype int32"):
    ALL[name](jnp.arange(6, dtype=jnp.int32).reshape(2, 3))


@pytest.mark.parametrize("name", sorted(ALL))
def test_empty_query_or_key_axes_are_refused(name):
  for shape in ((2, 0, 3), (2, 3, 0)):
    with pytest.raises(ValueError, match=re.escape(f"got shape {shape}")):
      ALL[name](jnp.zeros(shape))


def test_nap_gradient_is_finite_for_constant_rows():
  l = np.ones((3, 4), np.float32)
  assert np.isfinite(jax.jit(jax.grad(lambda x: nap_weights(x).sum()))(l)).all()


# one weight function over the queries (DNAS) and one row-local (NAP)
@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.fast_subset(lambda p: p["name"] in ("dnas", "nap"))
def test_jit_and_vmap(name):
  fn = ALL[name]
  l = random_logits(11, (3, 4, 5))
  want = fn(l)  # op by op
  chex.assert_trees_all_close(jax.jit(fn)(l), want, atol=1e-6)
  chex.assert_trees_all_close(jax.jit(jax.vmap(fn))(l), want, atol=1e-6)


def test_bad_arguments_name_the_argument():
  l = jnp.zeros((2, 4, 4))
  with pytest.raises(ValueError, match="num_iters"):
    sinkhorn_weights(l, 0)
  with pytest.raises(ValueError, match="num_iters"):
    sinkhorn_weights(l, 1.5)
  with pytest.raises(ValueError, match="u must lie in"):
    hnas_weights(l, 1.2)
  with pytest.raises(ValueError, match="u must lie in"):
    hnas_weights(l, jnp.array([0.5, -0.1]).reshape(2, 1, 1))
  with pytest.raises(ValueError, match="u of shape"):
    hnas_weights(l, jnp.ones((3,)) * 0.5)
  with pytest.raises(ValueError, match="mask of shape"):
    softmax_weights(l, jnp.ones((3, 4), bool))
  with pytest.raises(TypeError, match="mask must be boolean"):
    softmax_weights(l, jnp.ones((4, 4)))
  with pytest.raises(ValueError, match="gain of shape"):
    nap_weights(l, gain=jnp.ones((5,)))


def test_masked_logsumexp_matches_logsumexp_over_the_kept_entries():
  from scipy.special import logsumexp

  from normattn_jax.attention.weights import masked_logsumexp, masked_softmax
  x = 50.0 * random_logits(3, (4, 6))  # large: an unshifted exp would overflow
  mask = np.array(random_mask(3, (4, 6)))
  mask[1] = False  # row 1 keeps nothing
  kept = mask.any(-1)
  want = logsumexp(np.where(mask, np.asarray(x, np.float64), -np.inf), axis=-1)

  @jax.jit  # one program, not one per op
  def lse_and_grad(x, mask):
    lse = lambda x: masked_logsumexp(x, mask, axis=-1)
    return (lse(x), masked_logsumexp(x, mask, axis=-1, empty=-jnp.inf),
            jax.grad(lambda x: lse(x).sum())(x), masked_softmax(x, mask))
  got, got_empty_inf, grad, softmax = map(np.asarray, lse_and_grad(x, mask))
  np.testing.assert_allclose(got[kept], want[kept], rtol=1e-6)
  assert got[1] == 0.0 and got_empty_inf[1] == -np.inf
  np.testing.assert_allclose(grad, softmax, atol=1e-6)
  assert np.all(np.isfinite(grad)) and np.all(grad[1] == 0)
