"""The majority experiment of Brody et al.: data, model, LayerNorm variants, query angle and the
vmapped training."""
import json
import math
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normattn_jax.configs import layernorm_majority
from normattn_jax.analysis import majority as m
from normattn_jax.train.checkpoint import WorkdirError, open_workdir, unlock_workdir
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.train import grid as grid_lib
from normattn_jax.train.grid import run_grid
from normattn_jax.train.timing import counting

D = 8
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _partition_count(total, largest, parts):
  """Partitions of ``total`` into at most ``parts`` parts, each <= ``largest`` (recurrence)."""
  if total == 0:
    return 1
  if parts == 0 or largest == 0:
    return 0
  return sum(_partition_count(total - k, k, parts - 1) for k in range(1, min(largest, total) + 1))


def test_partitions_are_all_enumerated_once_in_a_random_order():
  first = list(m._partitions(20, 1, 6, np.random.default_rng(0)))
  second = list(m._partitions(20, 1, 6, np.random.default_rng(1)))
  assert len(first) == len(set(first)) == _partition_count(20, 20, 6) == 282
  assert set(first) == set(second) and first != second
  assert all(sum(p) == 20 and list(p) == sorted(p) for p in first)


def test_the_data_has_the_papers_statistics():
  counts, labels = m.majority_counts(0)
  assert counts.shape == (100_010, 20) and labels.shape == (100_010,)
  assert (counts.sum(1) == 50).all()
  top2 = np.sort(counts, 1)[:, -2:]
  assert (top2[:, 1] - top2[:, 0] >= 6).all()
  assert (counts.argmax(1) == labels).all()
  stats = m.data_statistics(counts)
  assert 7.5 < stats["types_per_sequence"] < 10  # ~8.6, unlike ~18.5 of a uniform draw
  assert 18.5 < stats["majority_count"] < 20.5  # ~19.6 of 50
  assert np.bincount(labels, minlength=20).min() > 0.8 * len(labels) / 20  # types permuted
  tokens = m.counts_to_tokens(counts[:3])
  assert tokens.shape == (3, 50) and (np.bincount(tokens[0], minlength=20) == counts[0]).all()


def test_bad_data_settings_are_named():
  with pytest.raises(ValueError, match="min_lead"):
    m.majority_counts(0, num_samples=100, seq_len=12, num_types=5, min_lead=40)
  with pytest.raises(ValueError, match="num_types"):
    m.majority_counts(0, num_types=1)
  with pytest.raises(ValueError, match="test_fraction"):
    m.stratified_split(np.zeros(10, int), 1.5, np.random.default_rng(0))


def test_stratified_split_keeps_each_labels_share():
  labels = np.random.default_rng(0).integers(0, 7, 1001)
  train, test = m.stratified_split(labels, 0.2, np.random.default_rng(1))
  assert len(test) == 200 and len(train) == 801
  assert len(np.union1d(train, test)) == 1001
  shares = np.bincount(labels[test], minlength=7) - 0.2 * np.bincount(labels, minlength=7)
  assert np.abs(shares).max() <= 1


def test_the_model_has_the_papers_584_parameters():
  shapes = jax.eval_shape(m.MajorityEncoder().init, jax.random.key(0),
                          jnp.zeros((1, 50), jnp.int32), 0)["params"]
  assert sum(math.prod(x.shape) for x in jax.tree.leaves(shapes)) == 584
  assert set(shapes["query"]) == {"kernel"}  # no in-projection bias
  assert set(shapes["attention_out"]) == {"kernel", "bias"}
  assert set(shapes["ffn_norm"]) == {"scale", "bias"}  # the norm before attention has none


# the variant traced: one program for every variant (op by op, each operation compiles)
NORM = jax.jit(m.pre_attention_norm)


@pytest.mark.parametrize("variant, centred, norm", [
    ("with_projection", True, math.sqrt(D)),
    ("without_projection", False, math.sqrt(D)),
    ("without_projection_code", False, 1 / math.sqrt(D))])
def test_each_variants_norm(variant, centred, norm):
  x = jax.random.normal(jax.random.key(0), (64, D)) + 0.5
  y = NORM(x, m.VARIANTS.index(variant))
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), norm, rtol=1e-5)
  assert (np.abs(y.mean(-1)).max() < 1e-5) == centred
  direction = x - x.mean(-1, keepdims=True) if centred else x
  np.testing.assert_allclose(y * jnp.linalg.norm(direction, axis=-1, keepdims=True),
                             direction * norm, rtol=1e-4, atol=1e-5)


def test_the_norms_stay_finite_on_constant_and_zero_inputs():
  x = jnp.stack([jnp.full(D, 3.0), jnp.zeros(D)])
  value_and_grad = jax.jit(jax.value_and_grad(  # one program, the variant traced
      lambda z, variant: m.pre_attention_norm(z, variant).sum()))
  for variant in range(len(m.VARIANTS)):
    value, grad = value_and_grad(x, variant)
    assert np.isfinite(value) and np.isfinite(grad).all()


def test_the_pair_form_gives_the_token_forms_logits_and_loss():
  counts, labels = m.majority_counts(3, num_samples=40)
  tokens = jnp.asarray(m.counts_to_tokens(counts))
  model = m.MajorityEncoder()
  params = jax.jit(model.init)(jax.random.key(1), tokens[:1], 0)  # one program (op by op: many)
  counts_f, labels = jnp.asarray(counts, jnp.float32), jnp.asarray(labels)
  pairs = jax.jit(m.present_pairs, static_argnums=1)(counts_f, counts.size)
  real = np.asarray(pairs.counts) > 0

  @jax.jit
  def both_forms(variant):
    position = jnp.argmax(tokens[pairs.sequence] == pairs.types[:, None], axis=1)  # of the type
    by_token = model.apply(params, tokens, variant)  # [batch, 50, 20]
    by_pair = model.apply(params, counts_f, pairs, variant, method=m.MajorityEncoder.from_pairs)
    token_loss = -jnp.take_along_axis(jax.nn.log_softmax(by_token), labels[:, None, None],
                                      -1).mean()
    token_accuracy = (by_token.argmax(-1) == labels[:, None]).mean()
    return (by_token[pairs.sequence, position], by_pair, m.pair_sums(by_pair, pairs, labels),
            token_loss, token_accuracy)

  for variant in range(len(m.VARIANTS)):
    expected, by_pair, (loss_sum, correct), token_loss, token_accuracy = both_forms(variant)
    np.testing.assert_allclose(by_pair[real], expected[real], atol=1e-4)
    np.testing.assert_allclose(loss_sum / counts.sum(), token_loss, rtol=1e-5)
    np.testing.assert_allclose(correct / counts.sum(), token_accuracy, rtol=1e-6)


def test_present_pairs_lists_the_present_types_and_counts_an_overflow():
  counts = jnp.array([[0, 2, 0, 3], [4, 0, 0, 0]])
  present_pairs = jax.jit(m.present_pairs, static_argnums=1)  # op by op, each operation compiles
  pairs = present_pairs(counts, 4)
  assert pairs.sequence.tolist() == [0, 0, 1, 0] and pairs.types.tolist()[:3] == [1, 3, 0]
  assert pairs.counts.tolist() == [2, 3, 4, 0] and int(pairs.overflow) == 0
  assert int(present_pairs(counts, 2).overflow) == 1


def test_query_angle_of_hand_built_queries():
  ones, unit = np.ones(D, np.float32), np.eye(D, dtype=np.float32)[0]
  angles = jax.jit(m.query_angles)(  # one program (op by op, each operation compiles)
      np.stack([3 * ones, -ones, unit - np.eye(D, dtype=np.float32)[1], unit]))
  np.testing.assert_allclose(angles, [0, 0, 90, math.degrees(math.acos(1 / math.sqrt(D)))],
                             atol=0.05)  # folded: -1 is on the line; arccos near 1 is coarse


def test_effective_queries_along_the_ones_line_give_angle_zero():
  """W_Q W_K^T = v 1^T maps every normalised embedding h to (h . v) 1."""
  model = m.MajorityEncoder()
  # one program each, the variant traced (op by op, each operation compiles)
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 5), jnp.int32), 0)
  v = np.eye(D, dtype=np.float32)[0] - np.eye(D, dtype=np.float32)[1]
  params["params"]["query"]["kernel"] = np.eye(D, dtype=np.float32)
  params["params"]["key"]["kernel"] = np.outer(np.ones(D, np.float32), v)  # W_K^T = v 1^T
  largest_angle = jax.jit(lambda params, variant: m.query_angles(model.apply(
      params, variant, method=m.MajorityEncoder.effective_queries)).max())
  for variant in range(len(m.VARIANTS)):
    assert float(largest_angle(params, variant)) < 0.1


SMALL = dict(num_seeds=2, num_samples=1000, seq_len=20, num_types=6, min_lead=2,
             batch_size=128, learning_rate=1e-2, eval_every_epochs=2, eval_block=96)


def small_config(**overrides):
  c = layernorm_majority.get_config()
  c.update(SMALL | overrides)
  return c


@pytest.fixture(scope="module")
def small_grid():
  """``small_config()``'s config, data, grid and programs: the grid compiled once for the
  tests that train or read it."""
  config = small_config()
  data = m.build_data(config)
  return (config, data) + m.build_grid(config, data)


def test_training_all_variants_and_seeds_in_one_program_learns(small_grid):
  config, data, grid, programs = small_grid
  assert data.train_counts.shape == (2, 808, 6) and data.test_counts.shape == (2, 202, 6)
  settings = grid.shard(m.per_model_settings(config))
  states = grid.init(grid.shard(m.model_keys(config)), settings, *grid.shared)
  embeddings = states.params["params"]["embedding"]["embedding"]
  np.testing.assert_array_equal(embeddings[0], embeddings[2])  # a seed's variants start alike
  before = grid.program(programs.evaluate)(states, settings)
  with counting() as at_calls:  # the chunk was compiled with the grid, once
    for _ in range(3):
      states, metrics = grid.chunk(states, settings)
  assert metrics["test_accuracy"].shape == (6,) and int(states.step[0]) == 3 * 2 * 7
  assert not metrics["diverged"].any() and not metrics["overflow"].any()
  assert (metrics["test_loss"] < before["test_loss"]).all()
  assert (metrics["test_accuracy"] > before["test_accuracy"]).mean() >= 0.5
  assert np.isfinite(metrics["query_angle"]).all()
  assert ((0 <= metrics["query_angle"]) & (metrics["query_angle"] <= 90)).all()
  assert at_calls.names == [] and grid.compiles.names == ["jit(init)", "jit(chunk)"]


def test_models_per_vmap_0_is_the_engines_auto_width(small_grid, monkeypatch):
  """0 means what it means in a sweep (``grid.models_per_vmap``): one model per vmap on a CPU,
  as many as fit half its memory on an accelerator; another value is the width (the grid's
  programs, compiled or not, are of the width it chose: left to compile at a first call)."""
  config, data, grid, _ = small_grid
  assert config.models_per_vmap == 0
  if jax.default_backend() == "cpu":
    assert grid.per_vmap == 1
  else:
    assert 1 <= grid.per_vmap <= config.num_models
  of = grid_lib.Grid.of
  monkeypatch.setattr(grid_lib.Grid, "of", lambda *args, **kwargs: of(*args, **kwargs,
                                                                       ahead=False))
  grid, _ = m.build_grid(small_config(models_per_vmap=3), data)
  assert grid.per_vmap == 3 and grid.compiled is None


def test_a_run_through_the_engine_equals_the_same_chunks_by_hand(small_grid):
  """``run_grid`` (what the experiment runs) trains the grid's programs and nothing else."""
  config, _, grid, _ = small_grid
  run = run_grid(grid, m.model_keys(config), m.per_model_settings(config), 2)
  settings = grid.shard(m.per_model_settings(config))
  states = grid.init(grid.shard(m.model_keys(config)), settings, *grid.shared)
  for index in range(2):
    states, metrics = grid.chunk(states, settings)
    for name, value in metrics.items():
      np.testing.assert_array_equal(run.metrics[name][index], np.asarray(value), err_msg=name)


def test_the_learning_rate_decays_linearly_over_10000_epochs():
  config = layernorm_majority.get_config()
  assert m.steps_per_epoch(config, 80_008) == 14  # the last batch of an epoch holds 2008
  schedule = m.learning_rate_schedule(config, 80_008)
  np.testing.assert_allclose([schedule(0), schedule(14_000), schedule(140_000)],
                             [1e-3, 0.9e-3, 0.0], atol=1e-9)


def test_the_data_statistics_are_given_per_data_set_too():
  data = m.build_data(small_config())
  stats = m.data_statistics(data.train_counts)
  per_set = [m.data_statistics(counts) for counts in data.train_counts]
  assert stats["types_per_sequence_per_data_set"] == pytest.approx(
      [s["types_per_sequence"] for s in per_set])
  assert stats["majority_count_per_data_set"] == pytest.approx(
      [s["majority_count"] for s in per_set])
  assert stats["types_per_sequence"] == pytest.approx(
      np.mean(stats["types_per_sequence_per_data_set"]))  # data sets of equal size


# ----- a run: its config, workdir guard, history and summary -----

def test_the_config_is_the_papers():
  c = layernorm_majority.get_config()
  m.validate_config(c)
  assert tuple(c.variants) == m.VARIANTS and c.num_seeds == 10 and c.seed == 0
  assert (c.num_samples, c.seq_len, c.num_types, c.min_lead, c.per_partition,
          c.test_fraction) == (100_000, 50, 20, 6, 10, 0.2)
  assert (c.d_model, c.ffn_features) == (8, 8)
  assert (c.batch_size, c.learning_rate, c.decay_epochs) == (6000, 1e-3, 10_000)


@pytest.mark.parametrize("overrides, message", [
    ({"num_layers": 2}, "config.num_layers=2: no such field"),
    ({"variants": ("with_projection", "with_projection")},
     "config.variants=('with_projection', 'with_projection'): must be distinct names"),
    ({"variants": ("standard",)}, "config.variants=('standard',): must be distinct names"),
    ({"variants": ()}, "config.variants=(): must be distinct names"),
    ({"num_seeds": 10, "models_per_vmap": 7},
     "config.models_per_vmap=7: must divide the number of models, 30"),
    ({"learning_rate": float("inf")}, "config.learning_rate=inf: must be a finite number > 0"),
    ({"batch_size": 0}, "config.batch_size=0: must be a positive integer"),
    ({"seed": -1}, "config.seed=-1: must be an integer >= 0"),
    ({"num_types": 1}, "config.num_types=1: must be an integer >= 2"),
    ({"num_types": 200}, "config.num_types=200: must be at most 127"),
    ({"seq_len": 128}, "config.seq_len=128: must be at most 127"),
    ({"test_fraction": 1.0}, "config.test_fraction=1.0: must lie in (0, 1)"),
    ({"eval_block": 0}, "config.eval_block=0: must be a positive integer"),
])
def test_a_bad_field_is_refused_naming_it_and_its_value(overrides, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    m.validate_config(small_config(**overrides))


def test_a_bad_config_is_refused_before_its_workdir_is_made(tmp_path):
  for field, value in (("decay_epochs", 0), ("num_types", 200), ("test_fraction", 0.0)):
    with pytest.raises(ValueError, match=re.escape(f"config.{field}={value!r}")):
      m.run(small_config(**{field: value}, steps=1), str(tmp_path / "never"))
    assert not os.path.exists(tmp_path / "never")


def test_the_committed_run_resumes_with_the_default_config(tmp_path):
  """REPRODUCTION.md resumes results/majority with the default config: its config.json is
  this config's (opened on a copy, nothing trained)."""
  workdir = str(tmp_path / "majority")
  shutil.copytree(os.path.join(REPO, "results", "majority"), workdir)
  assert open_workdir(workdir, layernorm_majority.get_config(), m.KIND) is None
  unlock_workdir(workdir)
  other = layernorm_majority.get_config()
  other.num_seeds = 3
  with pytest.raises(WorkdirError, match="num_seeds was 10, now 3"):
    open_workdir(workdir, other, m.KIND)


def test_a_run_resumes_for_more_steps_and_its_workdir_refuses_other_settings(tmp_path):
  workdir = str(tmp_path / "run")
  quiet = lambda line: None
  config = small_config()
  summary, curves = m.run(small_config(steps=1), workdir, log=quiet)  # one chunk: 14 steps
  assert summary["steps_run"] == 14 and summary["eval_every_steps"] == 14
  assert list(curves["steps"]) == [0, 14]
  assert curves["variants"]["with_projection"]["test_accuracy"].shape == (2, 2)  # evals, seeds
  with open(os.path.join(workdir, m.SUMMARY)) as f:
    assert json.load(f) == json.loads(json.dumps(summary))
  for name in ("config.json", "versions.json", "history.jsonl"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert not os.path.exists(os.path.join(workdir, "run.lock"))  # released

  more, curves = m.run(small_config(steps=28), workdir, log=quiet)  # resumed: one more chunk
  assert more["steps_run"] == 28 and list(curves["steps"]) == [0, 14, 28]
  whole, _ = m.run(small_config(steps=28), str(tmp_path / "whole"), log=quiet)
  assert more["variants"] == whole["variants"]  # as a run that was never stopped
  assert m.curves(read_history(workdir), config)["steps"].tolist() == [0, 14, 28]
  with pytest.raises(Interrupted, match="majority: out of time after 3 of 4"):
    m.run(small_config(steps=56), workdir, budget=Budget(minutes=1e-9), log=quiet)
  assert m.read_curves(workdir)["steps"].tolist() == [0, 14, 28, 42]  # its chunk kept
  timed, curves = m.run(small_config(steps=42), workdir, log=quiet)  # nothing left to train
  assert timed["steps_run"] == 42 and list(curves["steps"]) == [0, 14, 28, 42]

  with pytest.raises(WorkdirError, match="num_seeds was 2, now 3"):
    m.run(small_config(num_seeds=3, steps=28), workdir, log=quiet)
  with pytest.raises(ValueError, match="config.steps=0: must be a positive integer"):
    m.run(small_config(steps=0), str(tmp_path / "never"), log=quiet)
  assert not os.path.exists(tmp_path / "never")


def read_history(workdir):
  with open(os.path.join(workdir, "history.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_the_summary_counts_the_steps_to_each_accuracy():
  config = layernorm_majority.get_config()
  config.update(variants=("with_projection", "without_projection"), num_seeds=2)
  accuracy = {0: [0.1] * 4, 10: [0.6, 0.6, 0.4, 0.4], 20: [0.95, 0.75, 0.6, 0.8]}
  history = [{"step": step, "test_accuracy": values, "train_loss": [1.0] * 4,
              "test_loss": [1.0] * 4, "query_angle": [10.0] * 4}
             for step, values in accuracy.items()]
  summary = m.summarise(history, config, {"extra": 1})
  to = summary["variants"]["with_projection"]["steps_to_test_accuracy"]
  assert to["0.5"]["per_seed"] == [10, 10] and to["0.9"]["per_seed"] == [20, None]
  assert to["0.9"]["reached"] == 1 and to["0.8"]["seed_mean_curve"] == 20
  without = summary["variants"]["without_projection"]["steps_to_test_accuracy"]
  assert without["0.5"]["per_seed"] == [20, 20] and without["0.8"]["seed_mean_curve"] is None
  assert summary["without_over_with_steps"]["0.5"] == 2.0  # 20 steps against 10
  assert summary["without_over_with_steps"]["0.8"] is None
  assert summary["extra"] == 1 and summary["steps_run"] == 20
