"""A cell's numbers do not depend on the grid it is trained in: the same seed and learning rate
give the same curve alone and among other models, at any fixed vmap width."""
import jax
import numpy as np
import pytest

from normattn_jax.sweep import base_config
from normattn_jax.train.grid import model_keys
from normattn_jax.sweep.programs import Setup, build_grid
from normattn_jax.sweep.layout import ModelsAxis
from normattn_jax.train.timing import counting

CHUNKS = 3


def config(learning_rates, num_seeds, models_per_vmap):
  c = base_config()
  c.learning_rates, c.num_seeds = learning_rates, num_seeds
  c.task.update(name="mode_finding", output="classes", vocab_size=8, seq_len=16)
  c.model.update(d_model=16, num_heads=2, num_layers=1)
  c.train.update(num_steps=CHUNKS * 5, eval_every=5, batch_size=8,
                 models_per_vmap=models_per_vmap)
  c.eval.update(val_batches=2, case_set_size=4)
  return c


def train(arch, c):
  """Every model's state and metrics after CHUNKS evaluations, in grid order."""
  grid = build_grid(Setup(arch, c), c.num_seeds * len(c.learning_rates))
  axis = ModelsAxis.of(c)
  hp, seeds = axis.hyperparameters(), axis.seed_indices()
  hp_dev = grid.shard(hp)
  state = grid.init(grid.shard(model_keys(c.seed, seeds)), hp_dev, *grid.shared)
  history = []
  for _ in range(CHUNKS):
    state, metrics = grid.chunk(state, hp_dev)
    history.append(jax.tree.map(lambda x: np.asarray(x)[:grid.num_models], metrics))
  params = jax.tree.map(lambda x: np.asarray(x)[:grid.num_models], state.params)
  return params, jax.tree.map(lambda *x: np.stack(x), *history)


@pytest.mark.parametrize("models_per_vmap", [1, 4])
@pytest.mark.fast_subset(lambda p: p["models_per_vmap"] == 4)
@pytest.mark.usefixtures("fusion_emitters")
def test_a_cell_trains_alike_alone_and_in_a_grid(models_per_vmap):
  """Fails with one vmap over the whole models axis (the loss differs in its last bits at the
  first step, and training amplifies it): XLA vectorises a 1-model and a 6-model vmap apart."""
  alone = train("nap", config((1e-3,), 1, models_per_vmap))
  grid = train("nap", config((3e-3, 1e-3, 3e-4), 2, models_per_vmap))
  cell = 2  # learning rate 1e-3, seed 0: rows are lr x seed, seed innermost
  take = lambda tree, i: jax.tree.map(lambda x: x[i] if x.ndim and len(x) > i else x, tree)
  params_alone, metrics_alone = alone
  params_grid, metrics_grid = grid
  jax.tree.map(np.testing.assert_array_equal, take(params_alone, 0), take(params_grid, cell))
  for name, curve in metrics_alone.items():
    np.testing.assert_array_equal(curve[:, 0], metrics_grid[name][:, cell], err_msg=name)


def test_one_compilation_per_static_configuration():
  """However many models and learning rates, a grid is one compiled program per function, init
  and chunk, compiled once when the grid is built (no memory measurement of its own) and reused
  by every chunk: the learning rates are data, not constants, and no call compiles again."""
  c = config((3e-3, 1e-3, 3e-4), 2, 1)
  grid = build_grid(Setup("nap", c), 6)
  assert grid.compiles.names == ["jit(init)", "jit(chunk)"]
  axis = ModelsAxis.of(c)
  hp, keys = axis.hyperparameters(), model_keys(c.seed, axis.seed_indices())
  with counting() as at_calls:
    state = grid.start(grid.shard(keys), grid.shard(hp))
    for lr in (1e-3, 1e-4):  # other learning rates, same shapes
      state, _ = grid.chunk(state, grid.shard(dict(hp, learning_rate=np.full(6, lr, np.float32))))
  assert at_calls.names == []
