"""Dropout at a traced rate (each model's own in a grid) draws flax's masks and scales as flax
does for the same rate given as a number."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.dropout import Dropout, check_rate, draws
from normattn_jax.models.sequence import SequenceModel


# the same path at every rate: 0.25 in make test (its scale 4/3 inexact in float32)
@pytest.mark.fast_subset(lambda p: p["rate"] == 0.25)
@pytest.mark.parametrize("rate", [0.0625, 0.25, 0.5])
def test_a_traced_rate_gives_the_numbers_bits(rate):
  x = np.random.default_rng(0).standard_normal((4, 8, 16), np.float32)

  def loss(inputs, r, layer=Dropout):
    out = layer(r, broadcast_dims=(1,)).apply({}, inputs, deterministic=False,
                                              rngs={"dropout": jax.random.key(3)})
    return jnp.sum(jnp.sin(out))

  flax_path = jax.jit(jax.value_and_grad(lambda u: loss(u, rate, nn.Dropout)))(x)
  number = jax.jit(jax.value_and_grad(lambda u: loss(u, rate)))(x)
  traced = jax.jit(jax.value_and_grad(loss))(x, jnp.float32(rate))
  for a, b, c in zip(flax_path, number, traced):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


# one Dropout in both block layouts: mte in make test
@pytest.mark.fast_subset(lambda p: p["arch"] == "mte")
@pytest.mark.parametrize("arch", ["bert", "mte"])
def test_a_model_at_a_traced_rate_is_the_model_at_the_number(arch):
  model = SequenceModel(vocab_size=12, max_len=16, d_model=16, num_layers=1, num_heads=2,
                        arch=arch, output="classes", num_classes=12, dropout_rate=0.25)
  tokens = jax.random.randint(jax.random.key(0), (3, 16), 0, 12)
  params = model.init(jax.random.key(1), tokens)

  def loss(p, m):
    out = m.apply(p, tokens, deterministic=False, rngs={"dropout": jax.random.key(2)})
    return jnp.sum(out ** 2)

  number = jax.jit(jax.value_and_grad(lambda p: loss(p, model)))(params)
  traced = jax.jit(jax.value_and_grad(
      lambda p, r: loss(p, model.clone(dropout_rate=r))))(params, jnp.float32(0.25))
  # the same masks and forward bits; a gradient summed over masked rows may be rounded apart
  # (XLA moves a number's scale past the sum, not a traced one's)
  np.testing.assert_array_equal(number[0], traced[0])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), number[1],
               traced[1])


def test_rates_are_checked_where_they_are_numbers():
  with pytest.raises(ValueError, match=r"dropout_rate must lie in \[0, 1\), got 1.0"):
    check_rate(1.0)
  jax.jit(lambda r: check_rate(r) or r)(jnp.float32(2.0))  # the config checks a traced rate
  assert not draws(0.0) and draws(0.1)
  assert jax.jit(lambda r: jnp.float32(draws(r)))(jnp.float32(0.0)) == 1.0
