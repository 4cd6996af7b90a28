"""Runs laid out on a (models x data) mesh (``tests/test_mesh.py``, ``tests/mesh_worker.py``)."""
import jax
import numpy as np

from normattn_jax.sweep import base_config
from normattn_jax.sweep.programs import train_grid
from normattn_jax.pretrain import train as pretrain
from helpers.pretraining import VOCAB, RandomExamples, tiny_pretrain_config

GRID_SHARDS = 4  # of 8 devices: 2 lay out the models, 4 split each model's batch
LEARNING_RATE = 0.003


def grid_config(data_shards: int, batch_size: int = 8, num_steps: int = 6, eval_every: int = 3):
  """Three seeds of one small MTE grid, each model's batch split over ``data_shards``."""
  c = base_config()
  c.archs, c.learning_rates, c.num_seeds = ("mte",), (LEARNING_RATE,), 3
  c.task.seq_len = 8
  c.model.update(d_model=8, num_heads=2, num_layers=1)
  c.train.update(num_steps=num_steps, eval_every=eval_every, batch_size=batch_size,
                 checkpoint_every=0,
                 data_shards=data_shards)
  c.eval.update(val_batches=2, case_set_size=4, validation_case_sets=True)
  return c


def pretraining_steps(shard_parameters: bool, steps: int = 4):
  """Four training steps of a tiny HNAS ALBERT on fixed random examples."""
  c = tiny_pretrain_config("hnas")
  c.train.batch_size, c.train.shard_parameters = 8, shard_parameters
  pretrain.validate_pretrain_config(c)
  trainer = pretrain.Trainer(c, VOCAB)
  data = RandomExamples(64, 0)
  state = trainer.init(jax.random.key(0), trainer.global_batch(data, 0, 8, 0))
  losses = []
  for step in range(steps):
    state, metrics = trainer.train_step(state, trainer.global_batch(data, step, 8, 0))
    losses.append(float(metrics["loss"]))
  return losses, state


def flat(tree) -> np.ndarray:
  """Every leaf of ``tree``, flattened into one vector."""
  return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


def first_step(data_shards: int) -> dict:
  """The grid's initial parameters (read by its ``resume`` hook), its first step's loss and its
  parameters after that step, with each model's batch split over ``data_shards``."""
  seen = {}

  config = grid_config(data_shards, num_steps=1, eval_every=1)

  def resume(grid, state, per_model):  # the models axis as laid out: padded to the devices
    seen["initial"] = flat(jax.tree.map(lambda x: x[:config.num_seeds], state.params))
    return 0, state, {}
  run = train_grid(config, "mte", resume=resume)
  return dict(seen, loss=np.asarray(run.metrics["train_loss"]), params=flat(run.state.params))
