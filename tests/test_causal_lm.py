"""The GPT-2-style causal LM of Brody et al.'s Table 1: causality, the LayerNorm before attention,
the captured keys, training, and the unselectable-key counts on float32 keys."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.analysis import causal_lm_keys as lm_keys
from normattn_jax.analysis.unselectable import unselectable
from normattn_jax.models.causal_lm import CausalLM, capture_attention_inputs, init_params
from normattn_jax.norms import normalize

VOCAB, LENGTH = 13, 12


@pytest.fixture(scope="module")
def model_and_params():
  model = CausalLM(vocab_size=VOCAB, max_len=LENGTH, pre_attention_norm_kind="no_scaling")
  return model, init_params(model, jax.random.key(0))


def test_output_at_t_does_not_depend_on_later_tokens(model_and_params):
  model, params = model_and_params
  tokens = jax.random.randint(jax.random.key(1), (2, LENGTH), 0, VOCAB)
  changed = tokens.at[:, 7:].set((tokens[:, 7:] + 5) % VOCAB)
  logits, logits_changed = (model.apply({"params": params}, t) for t in (tokens, changed))
  np.testing.assert_allclose(logits[:, :7], logits_changed[:, :7], atol=1e-6)
  assert float(jnp.max(jnp.abs(logits[:, 7:] - logits_changed[:, 7:]))) > 1e-4


def test_the_layer_norm_before_attention_is_the_configured_kind(model_and_params):
  without, params = model_and_params
  standard = without.clone(pre_attention_norm_kind="standard")
  tokens = jax.random.randint(jax.random.key(2), (3, LENGTH), 0, VOCAB)
  # Same parameter tree (that LayerNorm has no gain or bias): only the normalisation differs.
  assert jax.tree.structure(init_params(standard, jax.random.key(0))) == \
      jax.tree.structure(params)
  got_without = capture_attention_inputs(without, {"params": params}, tokens)
  got_standard = capture_attention_inputs(standard, {"params": params}, tokens)
  # Layer 1 sees the same embeddings in both models.
  np.testing.assert_allclose(got_without["norm_inputs"][0], got_standard["norm_inputs"][0])
  x = got_without["norm_inputs"][0]
  centred = x - x.mean(-1, keepdims=True)
  np.testing.assert_allclose(got_without["attention_inputs"][0], centred, atol=1e-7)
  rms = jnp.sqrt(jnp.mean(centred ** 2, -1, keepdims=True) + without.layer_norm_epsilon)
  np.testing.assert_allclose(got_standard["attention_inputs"][0], centred / rms, rtol=1e-5,
                             atol=1e-6)
  for kind, got in (("no_scaling", got_without), ("standard", got_standard)):
    np.testing.assert_allclose(got["attention_inputs"],
                               normalize(got["norm_inputs"], kind, without.layer_norm_epsilon),
                               rtol=1e-5, atol=1e-6)
  # Scaling puts every key near the sphere of radius sqrt(d) (exactly on it but for epsilon);
  # projection alone leaves their lengths spread.
  spread = lambda v: float(jnp.std(jnp.linalg.norm(v, axis=-1)) / jnp.mean(jnp.linalg.norm(
      v, axis=-1)))
  assert spread(got_standard["attention_inputs"]) < 0.01 < 0.1 < spread(
      got_without["attention_inputs"])


def test_key_capture_shape(model_and_params):
  model, params = model_and_params
  tokens = jnp.zeros((3, 5), jnp.int32)
  got = capture_attention_inputs(model, {"params": params}, tokens)
  assert set(got) == {"norm_inputs", "attention_inputs"}
  for value in got.values():
    assert value.shape == (4, 3, 5, 8)  # [layers, batch, n, d]


def test_bad_fields_raise_naming_them():
  with pytest.raises(ValueError, match="pre_attention_norm_kind"):
    CausalLM(vocab_size=VOCAB, max_len=LENGTH, pre_attention_norm_kind="rms")
  with pytest.raises(ValueError, match="num_heads"):
    CausalLM(vocab_size=VOCAB, max_len=LENGTH, num_heads=3)
  model = CausalLM(vocab_size=VOCAB, max_len=4)
  with pytest.raises(ValueError, match="max_len"):
    model.init(jax.random.key(0), jnp.zeros((1, 5), jnp.int32))
  c = lm_keys.default_config()
  c.train.log_every = 7
  with pytest.raises(ValueError, match="train.log_every=7"):
    lm_keys.validate_config(c)
  c = lm_keys.default_config()
  c.data.corpus = "books"
  with pytest.raises(ValueError, match="data.corpus='books'"):
    lm_keys.validate_config(c)


def test_the_fields_a_resumed_run_may_change_exist():
  from normattn_jax.train.checkpoint import MAY_DIFFER, config_differences, config_json

  every_field = {field for field, _, _ in config_differences(
      {}, config_json(lm_keys.default_config()))}
  assert set(MAY_DIFFER["causal_lm"]) <= every_field
  assert "train.log_every" not in MAY_DIFFER["causal_lm"]  # it numbers the checkpoints


def test_a_tiny_training_lowers_the_loss_of_both_variants():
  c = lm_keys.default_config()
  c.model.update(max_len=LENGTH, num_layers=1)
  c.train.update(seeds=2, batch_size=4, num_steps=40, log_every=20, checkpoint_every=0,
                 warmup_steps=2, learning_rate=1e-2)
  lm_keys.validate_config(c)
  models = {name: lm_keys.build_model(c, VOCAB, kind) for name, kind in lm_keys.VARIANTS.items()}
  states = lm_keys.init_states(c, models)
  # The seeds differ, the variants of one seed start alike.
  first = states["with_scaling"].params["token_embedding"]["embedding"]
  assert float(jnp.max(jnp.abs(first[0] - first[1]))) > 0
  np.testing.assert_array_equal(first, states["without_scaling"].params["token_embedding"]
                                ["embedding"])
  stream = jnp.asarray(np.tile(np.arange(VOCAB, dtype=np.int32), 40))  # a predictable text
  chunk = lm_keys.make_train_chunk(c, c.train.log_every)
  states, early = chunk(states, stream)
  states, late = chunk(states, stream)
  for name in models:
    assert early[name].shape == (2, 20)
    assert np.all(np.asarray(late[name]).mean(1) < np.asarray(early[name])[:, :5].mean(1) - 0.3)
    assert not np.any(np.asarray(states[name].diverged))
    assert np.all(np.asarray(states[name].step) == 40)


def test_heldout_windows_are_disjoint_and_spread():
  stream = np.arange(100, dtype=np.int32)
  windows = lm_keys.heldout_windows(stream, 10, 4)
  np.testing.assert_array_equal(windows[:, 0], [0, 20, 50, 70])
  assert len(np.unique(windows)) == windows.size
  with pytest.raises(ValueError, match="11 asked for"):
    lm_keys.heldout_windows(stream, 10, 11)


def test_unselectable_counts_on_float32_projected_keys():
  rng = np.random.default_rng(0)
  x = (0.03 * rng.standard_normal((80, 8))).astype(np.float32)
  centred = x - x.mean(-1, keepdims=True)             # in float32: ~1e-9 off the subspace
  exact = x.astype(np.float64) - x.astype(np.float64).mean(-1, keepdims=True)
  want = unselectable(exact, tol=1e-6)
  assert want.any()
  # Scale-free, and float32 rounding does not make hull points selectable.
  np.testing.assert_array_equal(unselectable(centred, tol=1e-6), want)
  np.testing.assert_array_equal(unselectable(1000.0 * exact, tol=1e-6), want)
  # Projection only adds unselectable points; scaling to a sphere removes them all.
  assert np.all(want[unselectable(x)])
  counts = lm_keys.unselectable_counts(np.stack([centred, centred / np.linalg.norm(
      centred, axis=-1, keepdims=True)])[:, None], tol=1e-6)
  assert counts.shape == (2, 1)
  assert counts[0, 0] == want.sum() and counts[1, 0] == 0


def test_layer_statistics_keep_the_per_window_counts_they_come_from():
  stats = lm_keys.layer_statistics(np.array([[2, 1], [0, 0]]), vectors=4)
  assert stats["mean_percent"] == pytest.approx([37.5, 0.0])
  assert stats["std_percent"] == pytest.approx([12.5, 0.0])
  assert stats["unselectable_per_window"] == [[2, 1], [0, 0]]
  assert stats["vectors_per_window"] == 4
  recomputed = 100 * np.array(stats["unselectable_per_window"]) / stats["vectors_per_window"]
  assert recomputed.mean(-1) == pytest.approx(stats["mean_percent"])


def test_the_analysis_of_a_model_keeps_its_per_window_counts(model_and_params):
  model, params = model_and_params
  windows = np.asarray(jax.random.randint(jax.random.key(2), (3, LENGTH), 0, VOCAB))
  stats = lm_keys.analyze_model(model, params, windows, tol=1e-6)["attention_inputs"]
  counts = np.array(stats["unselectable_per_window"])
  assert counts.shape == (model.num_layers, 3) and stats["vectors_per_window"] == LENGTH
  np.testing.assert_allclose(100 * counts.mean(-1) / LENGTH, stats["mean_percent"])


def test_heldout_starts_are_the_windows_offsets():
  stream = np.arange(100, dtype=np.int32)
  np.testing.assert_array_equal(lm_keys.heldout_starts(100, 10, 4),
                                lm_keys.heldout_windows(stream, 10, 4)[:, 0])


@pytest.mark.parametrize("field, value", [
    ("train.learning_rate", float("inf")), ("train.weight_decay", float("nan")),
    ("analysis.tolerance", float("inf")), ("model.init_std", float("nan")),
])
def test_non_finite_floats_are_refused_naming_the_field(field, value):
  c = lm_keys.default_config()
  section, name = field.split(".")
  c[section][name] = value
  with pytest.raises(ValueError, match=f"config.{field}={value!r}: must be a finite number"):
    lm_keys.validate_config(c)
