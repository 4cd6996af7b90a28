"""The step's exact cuts: the L2 term left out of a program whose models all have weight 0, and
Adam's state as one flat buffer (``train.flat_adam``), give the bits of the step without them as
the tests compile (XLA's optimised CPU compile rounds them apart: BENCHMARKS.md); a stored sweep
config.json written before the flat buffer resumes in the per-tensor layout its checkpoints
hold."""
import json
import os

import jax
import numpy as np
import pytest

from normattn_jax.sweep.config import base_config
from normattn_jax.sweep.programs import traces_l2, train_grid
from normattn_jax.train.grid import model_keys
from normattn_jax.train.migrate import with_current_names

from helpers import REPO
from helpers.sweeps import case_sweep_config


def cut_and_uncut(arch):
  """The tiny grid's runs with both cuts and with neither."""
  cut = case_sweep_config(**{"archs": (arch,), "train.num_steps": 6, "train.eval_every": 3,
                             "train.flat_adam": True, "train.drop_zero_l2": True})
  uncut = case_sweep_config(**{"archs": (arch,), "train.num_steps": 6, "train.eval_every": 3,
                               "train.flat_adam": False, "sweep.name": "train.l2",
                               "sweep.grid": (0.0,)})
  assert cut.train.flat_adam and not traces_l2(cut) and traces_l2(uncut)
  return train_grid(cut, arch), train_grid(uncut, arch)


@pytest.mark.fast_subset(lambda p: p["arch"] == "bert")
@pytest.mark.parametrize("arch", ["bert", "nap"])  # bert: per-tensor clipping before the flat Adam
def test_the_cuts_keep_every_bit(arch, fusion_emitters):
  cut, uncut = cut_and_uncut(arch)
  for name, curve in uncut.metrics.items():
    np.testing.assert_array_equal(cut.metrics[name], curve, err_msg=name)
  for a, b in zip(jax.tree.leaves(cut.state.params), jax.tree.leaves(uncut.state.params)):
    np.testing.assert_array_equal(a, b)
  flat = [x for x in jax.tree.leaves(cut.state.opt_state) if np.ndim(x) == 2]
  assert len(flat) == 2  # mu and nu: [models, every parameter]
  assert flat[0].shape[1] == sum(np.size(x[0]) for x in jax.tree.leaves(cut.state.params))


def test_weights_for_a_program_without_the_l2_term_are_refused():
  c = case_sweep_config(**{"archs": ("nap",), "train.drop_zero_l2": True})
  hp = {"learning_rate": np.full(2, 1e-3, np.float32), "l2": np.array([0.0, 0.1], np.float32),
        "dropout": np.zeros(2, np.float32)}
  with pytest.raises(ValueError, match=r"hyperparameters\['l2'\] holds non-zero weights"):
    train_grid(c, "nap", hyperparameters=hp, keys=model_keys(0, np.zeros(2, int)))


def test_a_sweep_stored_before_the_flat_buffer_keeps_the_per_tensor_layout():
  with open(os.path.join(REPO, "results", "fig3_reduced", "config.json")) as f:
    stored = json.load(f)
  assert "flat_adam" not in stored["train"]
  assert with_current_names(stored, "sweep")["train"]["flat_adam"] is False
  assert with_current_names(stored, "sweep")["train"]["drop_zero_l2"] is False
  # opt-in: not bit for bit under XLA's optimised compile
  assert base_config().train.flat_adam is False and base_config().train.drop_zero_l2 is False

