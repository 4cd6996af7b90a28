"""The models axis of a grid (learning rate x swept value x seed, seed innermost) and the reading
of results folders written before ``sweep.values`` was renamed ``sweep.grid``."""
import glob
import json
import os
import shutil

import numpy as np
import pytest

from normattn_jax.sweep import artifacts
from normattn_jax.train.checkpoint import WorkdirError, check_workdir
from normattn_jax.sweep.config import base_config
from normattn_jax.train.layout import GroupSeedAxis
from normattn_jax.sweep.layout import ModelsAxis, grid_name
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.scoring import summarise

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Committed results: a vmapped sweep (L2), a static one (d) and none.
OLD_RUNS = ("table2_case_tokens_l2_reduced", "fig3_reduced", "table3_first_token_d64_n128_nap")


def l2_sweep(learning_rates=(0.1, 0.01, 0.001), grid=(0.0, 0.5), num_seeds=2):
  c = base_config()
  c.learning_rates, c.num_seeds = learning_rates, num_seeds
  c.sweep.name, c.sweep.grid = "train.l2", grid
  return c


def test_flat_order_rows_and_reshape_agree():
  axis = ModelsAxis.of(l2_sweep())
  assert axis.shape == (3, 2, 2) and axis.num_models == 12
  hp, seeds = axis.hyperparameters(), axis.seed_indices()
  np.testing.assert_array_equal(seeds, np.tile([0, 1], 6))  # seed innermost
  np.testing.assert_allclose(hp["learning_rate"], np.repeat([0.1, 0.01, 0.001], 4), rtol=1e-6)
  np.testing.assert_array_equal(hp["l2"], np.tile([0.0, 0.0, 0.5, 0.5], 3))
  curves = np.arange(5 * 12, dtype=np.float32).reshape(5, 12)  # [evals, models]
  cube = axis.unflatten(curves)
  assert cube.shape == (5, 3, 2, 2)
  np.testing.assert_array_equal(axis.flatten(cube), curves)
  covered = []
  for lr_index, value_index in axis.cells():
    rows = axis.rows(lr_index, value_index)
    covered += list(rows)
    np.testing.assert_array_equal(curves[:, rows], cube[:, lr_index, value_index, :])
    np.testing.assert_array_equal(seeds[rows], np.arange(2))
    assert set(hp["learning_rate"][rows]) == {np.float32(axis.learning_rates[lr_index])}
    assert set(hp["l2"][rows]) == {np.float32(axis.swept_values[value_index])}
    assert axis.swept_params(value_index) == {"train.l2": axis.swept_values[value_index]}
  assert covered == list(range(12))  # cells in flat order, each model once


def test_without_a_vmapped_sweep_the_middle_axis_has_one_entry():
  c = l2_sweep()
  c.sweep.name, c.sweep.grid, c.train.l2 = "model.d_model", (8, 16), 0.25
  axis = ModelsAxis.of(c)  # a static sweep: one grid per point, none in the models axis
  assert axis.shape == (3, 1, 2) and axis.swept_params(0) == {}
  np.testing.assert_array_equal(axis.hyperparameters()["l2"], np.full(6, 0.25, np.float32))
  np.testing.assert_array_equal(axis.rows(2, 0), [4, 5])
  assert grid_name("nap", {"model.d_model": 8}) == "nap[model.d_model=8]"
  assert grid_name("nap", {}) == "nap"


@pytest.mark.parametrize("kwargs,match", [
    (dict(swept_field="model.d_model", swept_values=(8.0,)), "swept_field='model.d_model'"),
    (dict(swept_field="", swept_values=(0.1,)), r"swept_values=\(0.1,\)"),
    (dict(swept_field="", swept_values=(None,), learning_rates=()), "0 learning rates"),
])
def test_a_bad_axis_is_refused(kwargs, match):
  fields = dict(learning_rates=(0.1,), num_seeds=1) | kwargs
  with pytest.raises(ValueError, match=match):
    ModelsAxis(**fields)


def test_rows_and_reshape_refuse_what_lies_outside_the_axis():
  axis = ModelsAxis.of(l2_sweep())
  with pytest.raises(IndexError, match=r"cell \(3, 0\)"):
    axis.rows(3, 0)
  with pytest.raises(ValueError, match=r"expected \[evals, 12\]"):
    axis.unflatten(np.zeros((2, 10)))


def old_run(name, tmp_path):
  """A copy of a committed results folder whose config.json names the sweep ``sweep.values``."""
  source = os.path.join(REPO, "results", name)
  workdir = tmp_path / name
  workdir.mkdir()
  for file in ("config.json", "metrics.npz", "summary.json"):
    shutil.copy(os.path.join(source, file), workdir / file)
  stored = json.loads((workdir / "config.json").read_text())
  if "grid" in stored["sweep"]:  # the folder was rewritten since: write it the old way
    stored["sweep"]["values"] = stored["sweep"].pop("grid")
  (workdir / "config.json").write_text(json.dumps(stored))
  return workdir, stored


@pytest.mark.parametrize("name", OLD_RUNS)
def test_an_old_results_folder_is_read_and_scored_as_stored(name, tmp_path):
  workdir, stored = old_run(name, tmp_path)
  config = artifacts.read_config(str(workdir))
  assert config.sweep.grid == tuple(stored["sweep"]["values"])
  assert "values" not in config.sweep.to_dict()
  plan = SweepPlan.of(config)
  summary = summarise(plan, artifacts.read_results(str(workdir), plan))
  assert summary == json.loads((workdir / "summary.json").read_text())


def test_a_dropout_sweep_stored_before_the_rate_was_data_reads_as_a_program_per_rate():
  plans = {name: SweepPlan.of(artifacts.read_config(os.path.join(REPO, "results", name)))
           for name in ("table2_case_tokens_dropout_reduced", "table2_case_tokens_l2_reduced")}
  dropout, l2 = plans.values()
  assert dropout.config.sweep.in_program is False and dropout.static
  assert [g.name for g in dropout.grids[:2]] == ["bert[train.dropout=0.0625]",
                                                  "mte[train.dropout=0.0625]"]
  assert l2.config.sweep.in_program is True and not l2.static
  assert l2.axis.swept_field == "train.l2"


def test_an_old_workdir_is_the_same_config_under_the_new_name(tmp_path):
  workdir, _ = old_run(OLD_RUNS[0], tmp_path)
  config = artifacts.read_config(str(workdir))
  check_workdir(str(workdir), config, "sweep")  # no difference: resumes
  config.sweep.grid = config.sweep.grid[:-1]
  with pytest.raises(WorkdirError, match=r"sweep\.grid was \[0\.0, 0\.0001, 0\.01\], now"):
    check_workdir(str(workdir), config, "sweep")


def committed_sweeps():
  """Every committed results folder that holds a finished sweep."""
  folders = []
  for path in sorted(glob.glob(os.path.join(REPO, "results", "**", "config.json"),
                               recursive=True)):
    folder = os.path.dirname(path)
    with open(path) as f:
      is_sweep = "archs" in json.load(f)
    if is_sweep and all(os.path.exists(os.path.join(folder, name))
                        for name in ("metrics.npz", "summary.json")):
      folders.append(os.path.relpath(folder, REPO))
  return folders


def test_every_committed_sweep_scores_to_its_stored_summary():
  folders = committed_sweeps()
  assert len(folders) >= 77
  for folder in folders:
    workdir = os.path.join(REPO, folder)
    plan = SweepPlan.of(artifacts.read_config(workdir))
    with open(os.path.join(workdir, "summary.json")) as f:
      assert summarise(plan, artifacts.read_results(workdir, plan)) == json.load(f), folder


def test_a_sweep_plan_names_every_grid_once_points_outer():
  c = l2_sweep()
  c.archs, c.sweep.name, c.sweep.grid = ("nap", "sum"), "model.d_model", (8, 16)
  c.sweep.steps_scale, c.sweep.steps_reference = "proportional", 8
  plan = SweepPlan.of(c)
  assert plan.static and plan.points == ((("model.d_model", 8),), (("model.d_model", 16),))
  assert [g.name for g in plan.grids] == ["nap[model.d_model=8]", "sum[model.d_model=8]",
                                          "nap[model.d_model=16]", "sum[model.d_model=16]"]
  assert plan.grid("sum", (("model.d_model", 16),)).key == ("sum", (("model.d_model", 16),))
  assert [g.name for g in plan.grids_of("nap")] == ["nap[model.d_model=8]",
                                                    "nap[model.d_model=16]"]
  assert plan.locate(1) == ((("model.d_model", 16),), 0)
  steps = [plan.point_config(p).train.num_steps for p in plan.points]
  assert steps == [c.train.num_steps, 2 * c.train.num_steps]  # each point's own, scaled
  assert plan.total_model_steps == 2 * sum(steps) * plan.axis.num_models
  assert [g.name for g in plan.training_order] == [  # the most work first, then as planned
      "nap[model.d_model=16]", "sum[model.d_model=16]", "nap[model.d_model=8]",
      "sum[model.d_model=8]"]
  c.sweep.steps_scale = ""  # equal steps: the wider grids, which have the more work, first
  assert [g.name for g in SweepPlan.of(c).training_order][:2] == ["nap[model.d_model=16]",
                                                                  "sum[model.d_model=16]"]
  for point in plan.points:  # a point's own models axis is the sweep's
    assert ModelsAxis.of(plan.point_config(point)) == plan.axis
  assert (plan.swept_field, plan.swept_values) == ("model.d_model", (8.0, 16.0))


def test_a_vmapped_or_no_sweep_plans_one_grid_per_arch():
  plan = SweepPlan.of(l2_sweep())
  assert not plan.static and plan.points == ((),)
  assert [g.name for g in plan.grids] == list(plan.archs)
  assert plan.locate(1) == ((), 1) and plan.axis.swept_field == "train.l2"
  plain = SweepPlan.of(base_config())
  assert plain.locate(None) == ((), 0) and (plain.swept_field, plain.swept_values) == ("", ())


def test_a_sweep_plan_refuses_a_grid_it_does_not_train():
  plan = SweepPlan.of(l2_sweep())
  with pytest.raises(ValueError, match=r"arch='gpt': the sweep trained \('bert'"):
    plan.grid("gpt")
  with pytest.raises(ValueError, match=r"point=\(\('model.d_model', 8\),\)"):
    plan.grid("nap", (("model.d_model", 8),))
  with pytest.raises(ValueError, match="arch 'gpt' is not one of the run's archs"):
    plan.grids_of("gpt")


def test_a_group_seed_axis_keeps_the_seed_innermost_as_a_sweeps_axis_does():
  axis = GroupSeedAxis(num_groups=3, num_seeds=2)
  np.testing.assert_array_equal(axis.group_indices(), [0, 0, 1, 1, 2, 2])
  np.testing.assert_array_equal(axis.seed_indices(), [0, 1, 0, 1, 0, 1])
  sweep = ModelsAxis((1e-3, 3e-4, 1e-4), "", (None,), 2)
  np.testing.assert_array_equal(axis.group_indices(), sweep.lr_indices())
  np.testing.assert_array_equal(axis.seed_indices(), sweep.seed_indices())
  curves = np.arange(12.0).reshape(2, 6)
  np.testing.assert_array_equal(axis.unflatten(curves)[:, 1], curves[:, axis.rows(1)])
  assert axis.num_models == 6 and axis.rows(2) == slice(4, 6)
