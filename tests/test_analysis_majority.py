"""The majority experiment's layer, query angle and vmapped training."""
import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.analysis.majority import MajorityLayer, query_angle, train_majority


def test_layer_shapes_and_tied_output():
  tokens = jnp.arange(10)[None] % 20
  model = MajorityLayer()
  params = model.init(jax.random.key(0), tokens)
  assert model.apply(params, tokens).shape == (1, 10, 20)
  assert "bias" not in params["params"]["attention"]["query"]
  assert "head" not in params["params"]  # the output reuses the embedding


def test_query_angle_is_zero_for_queries_along_the_ones_vector():
  tokens = jnp.arange(20)[None]
  params = MajorityLayer(attention_norm="no_projection").init(jax.random.key(0), tokens)
  ones = jnp.ones((8, 1, 8)) / 8
  params["params"]["attention"]["query"]["kernel"] = ones
  params["params"]["attention"]["key"]["kernel"] = ones  # W_Q W_K^T = 11^T / 8
  assert query_angle(params, tokens, "no_projection") < 0.1  # degrees; arccos near 1 is coarse


def test_training_reduces_the_loss_for_every_seed():
  curves = train_majority("standard", num_seeds=2, train_size=2000, test_size=500,
                          batch_size=200, steps=60, eval_every=30, learning_rate=1e-2)
  assert curves["train_loss"].shape == (2, 2)
  assert (curves["train_loss"][-1] < np.log(20)).all()
