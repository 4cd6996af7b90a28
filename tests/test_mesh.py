"""The (models x data) mesh: a grid lays its models over one axis and splits each model's batch
over the other (``train.data_shards``), pre-training shards its parameters over its devices
where ``train.shard_parameters`` asks (FSDP-style). On 8 host devices (a process of its own,
``tests/mesh_worker.py``) both give the one-device numbers to the tolerances
docs/accelerators.md states, each array laid out as the config asked; a mesh that does not
divide the devices or the batch is refused before anything compiles, with the numbers."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from normattn_jax.pretrain import train as pretrain
from normattn_jax.sweep import validate
from normattn_jax.train.grid import data_shards_for
from normattn_jax.sweep.programs import train_grid

from helpers import REPO, subprocess_env
from helpers.mesh import LEARNING_RATE, first_step, flat, grid_config, pretraining_steps


@pytest.mark.slow  # a process of its own that compiles two grids and a pre-training
def test_eight_devices_give_the_one_device_numbers_laid_out_as_asked(tmp_path):
  env = subprocess_env(XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
                       + " --xla_force_host_platform_device_count=8")
  done = subprocess.run([sys.executable, os.path.join(REPO, "tests", "mesh_worker.py"),
                         str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  with open(tmp_path / "layout.json") as f:
    layout = json.load(f)
  assert layout["asked"] == {"spec": "P('models',)", "mesh": {"models": 2, "data": 4}}
  assert layout["auto"] == layout["asked"]  # 3 models on 8 devices: 2 x 4
  # docs/accelerators.md, "The (models x data) mesh": what is equal, and to what tolerance.
  # The same initial state bit for bit, the first step's loss to float rounding (a mean of the
  # shards' means); Adam's first step moves each parameter by the learning rate in its
  # gradient's sign, which a gradient within rounding of zero may flip: 2 x the rate at most.
  one, sharded = first_step(1), np.load(tmp_path / "first_step.npz")
  np.testing.assert_array_equal(sharded["initial"], one["initial"])
  np.testing.assert_allclose(sharded["loss"], one["loss"], rtol=1e-6)
  moved = np.abs(sharded["params"] - one["params"])
  assert np.median(moved) < 1e-6 and moved.max() <= 2 * LEARNING_RATE * (1 + 1e-5)
  # Then it drifts as two float orders do: on this grid (6 steps) the losses stay within 1e-4
  # and the parameters within the rate per step; accuracies, counts of argmax hits, may differ
  # by the examples whose logits nearly tie, so they are not compared value by value.
  whole = train_grid(grid_config(1), "mte")
  eight = np.load(tmp_path / "grid.npz")
  np.testing.assert_allclose(eight["train_loss"], whole.metrics["train_loss"], rtol=1e-4)
  difference = np.abs(eight["params"] - flat(whole.state.params))
  assert np.median(difference) < 1e-5
  assert difference.max() <= LEARNING_RATE * 6

  # FSDP: every parameter and optimiser moment as parameter_spec lays it over the 8
  assert all(spec == str(pretrain.parameter_spec(tuple(shape), 8))
             for shape, spec in layout["pretraining"])
  assert sum(spec != "P()" for _, spec in layout["pretraining"]) > len(layout["pretraining"]) / 2
  losses, state = pretraining_steps(shard_parameters=False)
  np.testing.assert_allclose(layout["pretraining_losses"], losses, rtol=1e-5)
  np.testing.assert_allclose(np.load(tmp_path / "pretraining.npy"), flat(state.params),
                             atol=1e-6)
  assert layout["refusals"] == [
      "config.train.data_shards=3: must divide the 8 devices (a mesh of 8 // data_shards "
      "models x data_shards)",
      "config.train.data_shards=8: must divide config.train.batch_size (4), each shard "
      "training on an equal slice"]


def test_a_mesh_this_machine_cannot_lay_out_is_refused_before_compiling():
  devices = jax.device_count()
  with pytest.raises(ValueError, match=rf"config.train.data_shards={devices + 1}: must divide "
                                       rf"the {devices} devices"):
    validate(grid_config(devices + 1))
  with pytest.raises(ValueError, match=r"config.train.data_shards=-1: must be a"):
    validate(grid_config(-1))


def test_auto_data_shards_give_every_device_a_model_before_splitting_batches():
  assert data_shards_for(0, 3, 8, 8) == 4      # 2 devices on the models, 4 on each batch
  assert data_shards_for(0, 300, 32, 8) == 1   # more models than devices: no data axis
  assert data_shards_for(0, 3, 2, 8) == 2      # a batch of 2: 4 x 2, one device padded
  assert data_shards_for(0, 1, 3, 8) == 1      # no split divides the batch: models alone
  assert data_shards_for(2, 300, 32, 8) == 2   # asked for
  validate(grid_config(0))


def test_fsdp_splits_each_array_on_its_longest_axis_the_devices_divide():
  assert pretrain.parameter_spec((40, 8), 8) == jax.sharding.PartitionSpec("data", None)
  assert pretrain.parameter_spec((16, 64), 8) == jax.sharding.PartitionSpec(None, "data")
  assert pretrain.parameter_spec((3, 5), 8) == jax.sharding.PartitionSpec()
  assert pretrain.parameter_spec((), 8) == jax.sharding.PartitionSpec()
  assert pretrain.parameter_spec((40, 8), 1) == jax.sharding.PartitionSpec()
