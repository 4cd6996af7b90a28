"""DNAS, HNAS, Sinkhorn, the sink softmax and Scalable-Softmax at huge logits: exact for any
finite float32 logits, quadratic and fast paths alike, against their definitions evaluated in
100-digit decimal arithmetic.

A float64 evaluation of the definitions is not enough here: at |l| ~ 1e30 its rounding
(~1e14) is itself larger than the log-weights that decide a tie.
"""
import decimal
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from normattn_jax.attention import fast, fused
from normattn_jax.attention import weights as W
from normattn_jax.attention.numerics import shift_columns_then_rows, two_difference

from helpers.examples import examples

Q, K = 4, 5  # one compiled shape; smaller matrices are padded with masked entries
DIGITS = decimal.Context(prec=100)


# ----- the definitions, in exact-enough decimal arithmetic -----

def _logsumexp(values):
  top = max(values)
  return top + DIGITS.ln(sum(DIGITS.exp(v - top) for v in values))


def _normalize(logp, mask, axis):
  """Subtract each slice's log-sum-exp over its valid entries (axis 0: columns, 1: rows)."""
  out = [row[:] for row in logp]
  q, k = len(logp), len(logp[0])
  for outer in range(k if axis == 0 else q):
    cells = [(i, outer) for i in range(q)] if axis == 0 else [(outer, j) for j in range(k)]
    cells = [c for c in cells if mask[c]]
    if cells:
      lse = _logsumexp([logp[i][j] for i, j in cells])
      for i, j in cells:
        out[i][j] = logp[i][j] - lse
  return out


def _weights(logp, mask):
  return np.array([[float(DIGITS.exp(v)) if mask[i, j] else 0.0 for j, v in enumerate(row)]
                   for i, row in enumerate(logp)])


def exact_sinkhorn(l, mask, iters):
  """Eq. 10: pi^0 = exp(l), then columns and rows normalised in turn (one iteration: DNAS)."""
  with decimal.localcontext(DIGITS):
    logp = [[decimal.Decimal(float(v)) for v in row] for row in np.asarray(l)]
    for _ in range(iters):
      logp = _normalize(_normalize(logp, mask, 0), mask, 1)
    return _weights(logp, mask)


def exact_softmax(l, mask):
  with decimal.localcontext(DIGITS):
    return _weights(_normalize([[decimal.Decimal(float(v)) for v in row] for row in
                                np.asarray(l)], mask, 1), mask)


def exact_sink(l, mask, sink):
  """exp(l_j) / (exp(sink) + sum over the valid keys of exp(l_k))."""
  with decimal.localcontext(DIGITS):
    logp = [[decimal.Decimal(float(v)) for v in row] for row in np.asarray(l)]
    out = []
    for i, row in enumerate(logp):
      lse = _logsumexp([v for j, v in enumerate(row) if mask[i, j]] + [decimal.Decimal(sink)])
      out.append([v - lse for v in row])
    return _weights(out, mask)


def exact_ssmax(l, mask, scale):
  """softmax(scale * ln(n) * l) over each row's n valid keys (n at least 1)."""
  with decimal.localcontext(DIGITS):
    scaled = [[decimal.Decimal(scale) * DIGITS.ln(max(int(mask[i].sum()), 1))
               * decimal.Decimal(float(v)) for v in row] for i, row in enumerate(np.asarray(l))]
    return _weights(_normalize(scaled, mask, 1), mask)


# ----- huge logits, ties among them likely -----

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
HUGE = [1e6, -1e6, 1e8, -1e8, 3e8, 1e20, -1e30, 3e30, 1.7e38, -1.7e38, 3.4e38, -3.4e38, 0.0, 1.0]


@st.composite
def huge_logits(draw):
  """A [Q, K] float32 matrix whose entries come from a few values (so they tie), huge or any
  finite float32 (near the float maximum, subnormal, ...), and a mask of its valid entries."""
  pool = draw(st.lists(st.sampled_from(HUGE) | finite32, min_size=1, max_size=4))
  pool = np.array(pool, np.float32)
  with np.errstate(over="ignore"):  # past the float32 maximum: inf, dropped below
    near = np.nextafter(pool, np.float32(np.inf))
  pool = np.concatenate([pool, near[np.isfinite(near)]])  # near ties too, never past the maximum
  l = np.array(draw(st.lists(st.sampled_from(pool.tolist()), min_size=Q * K, max_size=Q * K)),
               np.float32).reshape(Q, K)
  q, k = draw(st.integers(1, Q)), draw(st.integers(1, K))
  mask = np.zeros((Q, K), bool)
  mask[:q, :k] = True
  if draw(st.booleans()):
    mask &= np.array(draw(st.lists(st.booleans(), min_size=Q * K, max_size=Q * K))).reshape(Q, K)
  return l, mask


QUADRATIC = {
    "dnas": (jax.jit(W.dnas_weights), lambda l, m: exact_sinkhorn(l, m, 1)),
    "sinkhorn2": (jax.jit(lambda l, m: W.sinkhorn_weights(l, 2, m)),
                  lambda l, m: exact_sinkhorn(l, m, 2)),
    "sinkhorn5": (jax.jit(lambda l, m: W.sinkhorn_weights(l, 5, m)),
                  lambda l, m: exact_sinkhorn(l, m, 5)),
    "hnas": (jax.jit(lambda l, m: W.hnas_weights(l, 0.3, m)),
             lambda l, m: 0.3 * exact_sinkhorn(l, m, 1) + 0.7 * exact_softmax(l, m)),
    "sink": (jax.jit(lambda l, m: W.sink_weights(l, 0.0, m)), lambda l, m: exact_sink(l, m, 0)),
    "sink-high": (jax.jit(lambda l, m: W.sink_weights(l, 1e30, m)),
                  lambda l, m: exact_sink(l, m, 1e30)),
    "ssmax": (jax.jit(lambda l, m: W.ssmax_weights(l, 1.0, m)),
              lambda l, m: exact_ssmax(l, m, 1.0)),
    "ssmax-small": (jax.jit(lambda l, m: W.ssmax_weights(l, 0.3, m)),
                    lambda l, m: exact_ssmax(l, m, 0.3)),
    "ssmax-negative": (jax.jit(lambda l, m: W.ssmax_weights(l, -0.5, m)),
                       lambda l, m: exact_ssmax(l, m, -0.5)),
}


def test_the_sink_softmax_keeps_huge_ties_apart_from_its_sink():
  """[1e8, 1e8] with sink 0: each 1/2 (a log-sum-exp subtracted gave 1 each, a row of 2)."""
  sink = jax.jit(W.sink_weights)  # one program, not one per op
  for huge in (1e8, 1e30, float(np.finfo(np.float32).max)):
    np.testing.assert_allclose(sink(np.array([[huge, huge]], np.float32)), [[0.5, 0.5]],
                               rtol=1e-6)


def test_the_fast_sink_path_keeps_the_log_sum_next_to_a_huge_sink():
  """[1e8, 1e8] against the sink 1e8: each 1/3 (a log-sum-exp of 1e8 + log 2 rounds to 1e8,
  which gave 1/4)."""
  q = np.array([[[[1e8, 1e8]]]], np.float32)
  eye = np.eye(2, dtype=np.float32)[None, None]
  out = jax.jit(fast.sink_attention)(q, eye, eye, 1e8)  # one program, not one per op
  np.testing.assert_allclose(out[0, 0], [[1 / 3, 1 / 3]], rtol=1e-6)


def test_scalable_softmax_keeps_the_order_of_logits_near_the_float_maximum():
  """Scaled by log(3) > 1, 3.3e38 and 3.2e38 would both pass the float maximum: not a tie."""
  np.testing.assert_array_equal(jax.jit(W.ssmax_weights)(np.array([[3.3e38, 3.2e38, 0.0]],
                                                                  np.float32)),
                                [[1.0, 0.0, 0.0]])  # one program, not one per op


jitted_dnas = jax.jit(W.dnas_weights)  # one program per shape, not one per op


def test_the_tie_at_1e8_is_split_one_third_two_thirds():
  """Column 0 ties at 1e8, so DNAS's second row weighs its keys 1/2 : 1 after the column step."""
  l = np.array([[1e8, -1e8], [1e8, 1e8]], np.float32)
  w = jitted_dnas(l)
  np.testing.assert_allclose(w, [[1.0, 0.0], [1 / 3, 2 / 3]], rtol=1e-6)
  h = jax.jit(lambda l: W.hnas_weights(l, 0.5))(l)  # one program, not one per op
  np.testing.assert_allclose(h, [[1.0, 0.0], [0.5 / 3 + 0.25, 1 / 3 + 0.25]], rtol=1e-6)


def test_rows_keep_summing_to_one_at_huge_ties():
  l = np.array([[1e8, 1e8], [-1e8, -1e8], [1e8, -1e8]], np.float32)
  np.testing.assert_allclose(jitted_dnas(l), exact_sinkhorn(l, np.ones((3, 2), bool), 1),
                             rtol=1e-6)
  # a row far below every column's maximum, its two entries 1e8 apart at 3e30
  l = np.array([[1e8, 0.0], [-3e30, -3e30]], np.float32)
  np.testing.assert_allclose(jitted_dnas(l), [[0.5, 0.5], [0.0, 1.0]], atol=1e-7)


# Sinkhorn's five iterations repeat its two; a scale of 0.3 takes the branch of 1.0
@pytest.mark.parametrize("name", sorted(QUADRATIC))
@pytest.mark.fast_subset(lambda p: p["name"] not in ("sinkhorn5", "ssmax-small"))
@settings(max_examples=examples(60), deadline=None)
@given(case=huge_logits())
def test_quadratic_weights_equal_the_definition_at_any_finite_logits(name, case):
  fn, ref = QUADRATIC[name]
  l, mask = case
  np.testing.assert_allclose(fn(l, mask), ref(l, mask), atol=2e-6, rtol=1e-5)


@functools.cache
def quadratic_grad(name):
  """The gradient of ``sum(QUADRATIC[name](l, mask) * probe)`` in ``l``: one program."""
  fn, _ = QUADRATIC[name]
  return jax.jit(jax.grad(lambda l, mask, probe: jnp.sum(fn(l, mask) * probe)))


# one gradient per weight function; the other parameters' values:
# test_quadratic_weights_equal_the_definition_at_any_finite_logits
@pytest.mark.parametrize("name", sorted(QUADRATIC))
@pytest.mark.fast_subset(lambda p: p["name"] in ("dnas", "hnas", "sinkhorn2", "sink", "ssmax"))
@settings(max_examples=examples(20), deadline=None)
@given(case=huge_logits(), seed=st.integers(0, 2**16))
def test_gradients_stay_finite_at_any_finite_logits(name, case, seed):
  l, mask = case
  probe = jax.random.normal(jax.random.key(seed), l.shape)
  grad = np.asarray(quadratic_grad(name)(l, mask, probe))
  assert np.isfinite(grad).all()
  assert (grad[~mask] == 0).all()


def structured_masks(full, causal: bool):
  """The fast and fused paths' masks of a drawn mask: ``(query_mask, key_mask, mask)``, the
  valid queries and keys and the dense mask they (and ``causal``) make."""
  query_mask, key_mask = full.any(1), full.any(0)
  mask = query_mask[:, None] & key_mask[None, :]
  if causal:
    mask &= np.tril(np.ones((Q, K), bool), K - Q)
  return query_mask, key_mask, mask


# The paths equal the definitions under causal masks too: DNAS, HNAS and Sinkhorn with the
# opt-in (their outputs then see later positions, test_causality.py).
LEAK = dict(allow_future_leak=True)


def _fast_dnas(q, k, v, **masks):
  return fast.dnas_attention(q, k, v, block_size=2, **LEAK, **masks)


def _fast_hnas(q, k, v, **masks):
  return fast.hnas_attention(q, k, v, 0.3, block_size=2, **LEAK, **masks)


def _fast_sinkhorn(q, k, v, **masks):
  return fast.sinkhorn_attention(q, k, v, 3, block_size=3, **LEAK, **masks)


def _fast_sink(q, k, v, **masks):
  return fast.sink_attention(q, k, v, 1e8, block_size=2, **masks)


FAST = {
    "sink": (jax.jit(_fast_sink, static_argnames="causal"), lambda l, m: exact_sink(l, m, 1e8)),
    "dnas": (jax.jit(_fast_dnas, static_argnames="causal"), lambda l, m: exact_sinkhorn(l, m, 1)),
    "sinkhorn3": (jax.jit(_fast_sinkhorn, static_argnames="causal"),
                  lambda l, m: exact_sinkhorn(l, m, 3)),
    "hnas": (jax.jit(_fast_hnas, static_argnames="causal"),
             lambda l, m: 0.3 * exact_sinkhorn(l, m, 1) + 0.7 * exact_softmax(l, m)),
}


@functools.cache
def fast_and_grad(name, causal):
  """``FAST[name]``'s output and the gradient of its sum in the queries, from one program."""
  fn, _ = FAST[name]

  @jax.jit
  def run(q, k, v, **masks):
    out, pullback = jax.vjp(lambda q: fn(q, k, v, causal=causal, **masks), q)
    return out, pullback(jnp.ones_like(out))[0]
  return run


@pytest.mark.parametrize("name", sorted(FAST))
@settings(max_examples=examples(30), deadline=None)
@given(case=huge_logits(), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_fast_paths_equal_the_definition_at_any_finite_logits(name, case, causal, seed):
  """Queries are the logits' rows and keys the unit vectors, so ``q . k`` is the logits exactly;
  the masks are the fast path's structured ones (valid queries, valid keys, causal)."""
  _, ref = FAST[name]
  l, full = case
  query_mask, key_mask, mask = structured_masks(full, causal)
  q = l[None, None]
  k = np.eye(K, dtype=np.float32)[None, None]
  v = jax.random.normal(jax.random.key(seed), (1, 1, K, 3))
  got, grad = fast_and_grad(name, causal)(q, k, v, query_mask=query_mask[None],
                                          key_mask=key_mask[None])
  np.testing.assert_allclose(got[0, 0], ref(l, mask) @ np.asarray(v[0, 0], np.float64),
                             atol=1e-5, rtol=1e-5)
  assert np.isfinite(grad).all()


FUSED = {
    "dnas": (jax.jit(lambda q, k, v, **m: fused.dnas_attention(q, k, v, block_size=2, **LEAK,
                                                               **m),
                     static_argnames="causal"), lambda l, m: exact_sinkhorn(l, m, 1)),
    "sinkhorn3": (jax.jit(lambda q, k, v, **m: fused.sinkhorn_attention(q, k, v, 3, block_size=3,
                                                                         **LEAK, **m),
                          static_argnames="causal"), lambda l, m: exact_sinkhorn(l, m, 3)),
    "hnas": (jax.jit(lambda q, k, v, **m: fused.hnas_attention(q, k, v, 0.3, block_size=2, **LEAK,
                                                               **m),
                     static_argnames="causal"),
             lambda l, m: 0.3 * exact_sinkhorn(l, m, 1) + 0.7 * exact_softmax(l, m)),
    "sink": (jax.jit(lambda q, k, v, **m: fused.sink_attention(q, k, v, 1e8, **m),
                     static_argnames="causal"), lambda l, m: exact_sink(l, m, 1e8)),
}


def test_fused_dnas_splits_the_tie_at_1e8_as_the_definition():
  """[[1e8, -1e8], [1e8, 1e8]]: the second row 1/3, 2/3 (one rounding of l - a gave 1/2, 1/2)."""
  q = np.array([[1e8, -1e8], [1e8, 1e8]], np.float32)[None, :, None, :]
  eye = np.eye(2, dtype=np.float32)[None, :, None, :]
  out = jax.jit(fused.dnas_attention)(q, eye, eye)  # one program, not one per op
  np.testing.assert_allclose(out[0, :, 0], [[1.0, 0.0], [1 / 3, 2 / 3]], rtol=1e-6)


def test_fused_hnas_keeps_a_lone_key_at_the_float_minimum():
  """One valid key at -3.4e38: XLA's kernel masks with the float minimum, a tie with that key;
  HNAS where cuDNN does not take the call is fast.py's, both halves exact: the key's value."""
  mask = np.zeros((Q, K), bool)
  mask[0, 0] = True
  q = np.full((1, Q, 1, K), -3.4e38, np.float32)
  v = jax.random.normal(jax.random.key(0), (1, K, 1, 3))
  out = FUSED["hnas"][0](q, np.eye(K, dtype=np.float32)[None, :, None, :], v, causal=False,
                         query_mask=mask.any(1)[None], key_mask=mask.any(0)[None])
  np.testing.assert_allclose(out[0, 0, 0], v[0, 0, 0], rtol=1e-6)
  assert (np.asarray(out)[0, 1:] == 0).all()


@pytest.mark.parametrize("name", sorted(FUSED))
@settings(max_examples=examples(30), deadline=None)
@given(case=huge_logits(), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_fused_paths_equal_the_definition_at_any_finite_logits(name, case, causal, seed):
  """As the fast paths' test, in the fused layout ``[..., n, h, d]``."""
  fn, ref = FUSED[name]
  l, full = case
  query_mask, key_mask, mask = structured_masks(full, causal)
  q = l[None, :, None, :]
  k = np.eye(K, dtype=np.float32)[None, :, None, :]
  v = jax.random.normal(jax.random.key(seed), (1, K, 1, 3))
  masks = dict(query_mask=query_mask[None], key_mask=key_mask[None])
  got = fn(q, k, v, causal=causal, **masks)
  np.testing.assert_allclose(got[0, :, 0], ref(l, mask) @ np.asarray(v[0, :, 0], np.float64),
                             atol=1e-5, rtol=1e-5)


def test_two_difference_keeps_what_the_rounded_difference_loses():
  a = jnp.array([3e30, 1e8, -3.4e38, 1.0], jnp.float32)
  b = jnp.array([-1e8, 1.5e-7, 1e-45, 1e-8], jnp.float32)
  hi, lo = two_difference(a, b)
  exact = [decimal.Decimal(float(x)) - decimal.Decimal(float(y)) for x, y in zip(a, b)]
  assert [decimal.Decimal(float(h)) + decimal.Decimal(float(e)) for h, e in zip(hi, lo)] == exact
  assert float(lo[0]) == 1e8 and float(hi[0]) == float(a[0])


def test_shifted_logits_are_exact_where_their_exponential_counts():
  """Rows 3.4e38 below their columns' maxima keep a gap of 2 (which 3.4e38 - 2 rounds away),
  rows 6e38 below them (past the float range) their tie; every row's largest entry is 0."""
  shift = jax.jit(lambda l: shift_columns_then_rows(l, jnp.max(l, axis=0, keepdims=True), None))
  l = np.array([[0.0, 2.0], [-3.4e38, -3.4e38]], np.float32)
  np.testing.assert_array_equal(shift(l), [[0.0, 0.0], [0.0, -2.0]])
  l = np.array([[3e38, 3e38], [-3e38, -3e38]], np.float32)
  np.testing.assert_array_equal(shift(l), [[0.0, 0.0], [0.0, 0.0]])
  np.testing.assert_allclose(jitted_dnas(l), 0.5, rtol=1e-6)
