"""LayerNorm variants: projection and scaling (Brody et al.)."""
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.norms import LayerNorm, normalize

X = 3.0 * jax.random.normal(jax.random.key(0), (4, 6, 16)) + 1.5


def test_standard_equals_flax_layer_norm():
  ours, theirs = LayerNorm(epsilon=1e-3), nn.LayerNorm(epsilon=1e-3)
  params = theirs.init(jax.random.key(1), X)
  params = jax.tree.map(lambda p: p + jax.random.normal(jax.random.key(2), p.shape), params)
  assert jax.tree.structure(ours.init(jax.random.key(1), X)) == jax.tree.structure(params)
  chex.assert_trees_all_close(ours.apply(params, X), theirs.apply(params, X), atol=1e-5)


def test_standard_is_projection_then_scaling():
  d = X.shape[-1]
  y = normalize(X, "standard", epsilon=0.0)
  np.testing.assert_allclose(y.sum(-1), 0.0, atol=1e-4)  # orthogonal to the all-ones vector
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), np.sqrt(d), rtol=1e-5)  # on the sphere
  projected = normalize(X, "no_scaling")
  chex.assert_trees_all_close(normalize(projected, "no_projection", epsilon=0.0), y, atol=1e-5)


def test_no_projection_keeps_the_mean_direction():
  y = normalize(X, "no_projection", epsilon=0.0)
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), np.sqrt(X.shape[-1]), rtol=1e-5)
  cos = jnp.sum(y * X, -1) / jnp.linalg.norm(y, axis=-1) / jnp.linalg.norm(X, axis=-1)
  np.testing.assert_allclose(cos, 1.0, atol=1e-6)  # a pure rescaling of x


def test_no_scaling_and_none():
  chex.assert_trees_all_close(normalize(X, "no_scaling"), X - X.mean(-1, keepdims=True),
                              atol=1e-6)
  chex.assert_trees_all_close(normalize(X, "none"), X)


def test_bf16_is_finite():
  y = normalize(X.astype(jnp.bfloat16), "standard")
  assert y.dtype == jnp.bfloat16 and jnp.isfinite(y.astype(jnp.float32)).all()


def test_bad_kind():
  with pytest.raises(ValueError, match="kind"):
    LayerNorm(kind="rms")
