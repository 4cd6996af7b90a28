"""Explaining away: per-key weight sums of a model's layers."""
import jax
import numpy as np

from normattn_jax import SequenceModel
from normattn_jax.analysis import explaining_away as ea
from normattn_jax.attention import softmax_weights
from normattn_jax.sweep.programs import Setup


def model_of(normalization):
  return SequenceModel(vocab_size=100, max_len=10, d_model=16, num_layers=2, num_heads=2,
                       normalization=normalization)


def test_weight_sums_of_every_layer_and_the_dnas_bound():
  tokens = np.random.default_rng(0).integers(0, 100, (3, 10), dtype=np.int32)
  # one program (op by op, each of its operations would compile alone); both normalisations
  # have no parameters of their own, so the models share them
  params = jax.jit(model_of("dnas").init)(jax.random.key(1), tokens)
  params = jax.tree.map(lambda p: 20 * p, params)  # peaky logits
  for normalization, bounded in (("dnas", True), ("softmax", False)):
    model = model_of(normalization)
    weights = jax.jit(lambda p, model=model: ea.attention_weights(model, p, tokens))(params)
    assert len(weights) == 2 and weights[0].shape == (3, 2, 10, 10)
    sums = ea.key_weight_sums(weights[1])
    assert sums.shape == (3, 2, 10)
    if bounded:
      assert sums.min() >= 1 / 10 - 1e-6


def test_explained_away_fraction():
  logits = np.zeros((4, 4), np.float32)
  logits[:, 0] = 40.0  # every query looks at key 0 only
  sums = ea.key_weight_sums(jax.jit(softmax_weights)(logits))
  np.testing.assert_allclose(sums[0], 4.0, rtol=1e-6)
  assert ea.explained_away_fraction(sums) == 0.75


def test_a_trained_case_model_carries_its_normalisation():
  """Fig. 1's runs train the MTE layout with the scheme's normalisation (the config's
  ``attention.name``): DNAS keeps every key's sum over the queries at 1/S or more, which
  softmax does not promise, and the same parameters under softmax give other sums."""
  setup, params, val_acc = ea.train_case_model(ea.SCHEMES["DNAS"], steps=4, seq_len=8,
                                               d_model=8, learning_rate=0.01)
  sums, entry = ea.probe_key_sums(setup, params, val_acc)
  assert sums.shape == (2 * 4 * ea.PROBE_BATCH * 8,)  # layers x heads x batch x keys
  assert 0 <= entry["val_acc"] <= 1
  assert entry["log_one_over_S"] == np.log(1 / 8)
  assert sums.min() >= 1 / 8 - 1e-6 and entry["explained_away_fraction"] == 0
  as_softmax = setup.config.copy_and_resolve_references()
  as_softmax.attention.name = ea.SCHEMES["UNAS"]
  softmax_sums, _ = ea.probe_key_sums(Setup(setup.arch, as_softmax), params, val_acc)
  assert not np.array_equal(softmax_sums, sums)
