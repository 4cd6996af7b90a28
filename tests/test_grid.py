"""The grid engine: validation, determinism, resume, divergence isolation, 8 devices."""
import json
import re
import os
import subprocess
import sys
import textwrap

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from normattn_jax import _extras
from normattn_jax.train import make_optimizer
from normattn_jax.sweep import base_config, validate
from normattn_jax.sweep.programs import Setup, make_programs
from normattn_jax.train.grid import models_per_vmap, program_bytes, width_within
from normattn_jax.train.optim import (clip_by_tensor_norm, learning_rate_of, schedule_shape,
                                     with_learning_rate)
from normattn_jax.reporting.tables import regularization_table
from normattn_jax.sweep.scoring import summarise
from normattn_jax.sweep.config import point_config, static_points
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.train import LOGGED, load_model, resummarise

from helpers import REPO, TESTS, subprocess_env
from helpers.commands import run_flags
from helpers.sweeps import case_sweep_config, read, run, tiny_sweep_config


def history(workdir):
  with open(os.path.join(workdir, "history.jsonl")) as f:
    return [json.loads(line) for line in f]


def history_bytes(workdir):
  with open(os.path.join(workdir, "history.jsonl"), "rb") as f:
    return f.read()


def grid_rows(workdir, grid):
  """The bytes of ``history.jsonl``'s rows of one grid."""
  with open(os.path.join(workdir, "history.jsonl"), "rb") as f:
    return b"".join(line for line in f if json.loads(line)["grid"] == grid)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("reference")
  run(case_sweep_config(), workdir)
  return workdir


def test_outputs(reference):
  summary = read(reference)
  assert len(summary["cells"]) == 2 * 2  # archs x learning rates
  cell = summary["cells"][0]
  assert set(cell) >= {"arch", "learning_rate", "params", "metrics"}
  for name in ("train_acc", "val_acc", "case_acc_argmin", "case_acc_first", "case_acc_argmax"):
    stats = cell["metrics"][name]
    assert stats["min"] <= stats["mean"] <= stats["max"]
  assert "val_case_acc_first" not in cell["metrics"]  # eval.validation_case_sets is off
  metrics = np.load(os.path.join(reference, "metrics.npz"))
  assert metrics["nap/val_acc"].shape == (3, 2, 1, 2)  # evals, lrs, swept, seeds
  assert os.path.exists(os.path.join(reference, "config.json"))
  # the figures are the caller's (reporting.figures.draw_finished_sweep): training draws none
  assert not [name for name in os.listdir(reference) if name.endswith(".png")]
  recorded = read(reference, "versions.json")  # what the run ran with
  assert recorded == json.loads(json.dumps(_extras.versions()))
  for name in ("normattn_jax", "jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint"):
    assert recorded["packages"][name], name
  assert recorded["python"] and recorded["device_kind"] and recorded["device_count"] == 1


def test_history_holds_each_learning_rates_means_per_grid_and_evaluation(reference):
  """history.jsonl: per grid, evaluation and learning rate (seed innermost), the seeds' mean."""
  rows = history(reference)
  metrics = np.load(os.path.join(reference, "metrics.npz"))
  expected = []
  for arch in ("nap", "sum"):
    for e, step in enumerate(metrics["eval_steps"]):
      for i, lr in enumerate(("0.001", "0.0003")):
        expected.append({"step": int(step), "grid": arch, "learning_rate": lr,
                         **{key: pytest.approx(float(np.mean(metrics[f"{arch}/{key}"][e, i])))
                            for key in LOGGED}})
  assert rows == expected


def test_seeds_are_averaged_before_the_best_over_training_is_taken():
  """The paper's pixel values: two seeds that peak at different evaluations average 0.5, not 1."""
  c = case_sweep_config(archs=("nap",), learning_rates=(0.001, 0.0003))
  curve = lambda *evals: np.array(evals, np.float32)  # [evals, lr x seed]
  history = {"train_acc": curve([1.0, 0.0, 0.2, 0.2], [0.0, 1.0, 0.4, 0.4]),
             "val_acc": curve([0.3, 0.3, 0.9, 0.1], [0.3, 0.3, 0.1, 0.9]),
             "train_loss": curve([2.0, 1.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0]),
             "diverged": np.zeros((2, 4), bool)}
  summary = summarise(SweepPlan.of(c), {("nap", ()): history})
  first, second = summary["cells"]
  assert first["metrics"]["train_acc"] == {"min": 0.0, "mean": 0.5, "max": 1.0}
  assert first["metrics"]["train_loss"]["mean"] == 1.5
  assert second["metrics"]["val_acc"]["mean"] == pytest.approx(0.5)
  # train and validation are each at their best learning rate, as the paper's tables
  assert summary["best"]["nap"] == {"train_acc": 0.5, "train_learning_rate": 0.001,
                                    "val_acc": pytest.approx(0.5), "val_learning_rate": 0.0003,
                                    "learning_rate": 0.0003}


def test_regularization_table_takes_the_best_nonzero_value_of_each_regularizer():
  best = lambda train, val: {"train_acc": train, "val_acc": val}
  l2 = {"best": {"max train.l2=0": best(0.5, None), "nap train.l2=0": best(0.90, 0.80),
                 "nap train.l2=0.0001": best(0.95, 0.70), "nap train.l2=0.01": best(0.85, 0.75)}}
  dropout = {"best": {"nap train.dropout=0.0625": best(0.60, 0.81),
                      "nap train.dropout=0.25": best(0.70, 0.50)}}
  assert regularization_table([l2, dropout]).splitlines() == [
      "| | nap | max |", "|---|---|---|",
      "| train, unregularised | 90.0 | 50.0 |",
      "| train, with dropout | 70.0 (0.25) | - |",
      "| train, with L2 | 95.0 (0.0001) | - |",
      "| validation, unregularised | 80.0 | - |",
      "| validation, with dropout | 81.0 (0.0625) | - |",
      "| validation, with L2 | 75.0 (0.01) | - |"]
  with pytest.raises(ValueError, match="model.d_model"):
    regularization_table([{"best": {"nap model.d_model=32": best(0.9, 0.8)}}])


def test_resummarise_rebuilds_the_summary_from_the_saved_curves(reference, tmp_path):
  for name in ("config.json", "metrics.npz"):
    (tmp_path / name).write_bytes((reference / name).read_bytes())
  assert resummarise(str(tmp_path)) == read(reference)
  assert os.path.exists(tmp_path / "summary.json")


@pytest.mark.slow  # a run that is not repeatable also fails the resumed run's equality below
def test_same_config_same_summary_its_grids_compiled_two_at_once(reference, tmp_path,
                                                                  monkeypatch):
  from normattn_jax.sweep import programs
  monkeypatch.setattr(programs, "COMPILE_THREADS", 2)
  run(case_sweep_config(), tmp_path)
  assert read(tmp_path) == read(reference)


def test_killed_run_resumes_to_the_same_numbers_and_history(reference, tmp_path, capsys):
  with pytest.raises(Interrupted):
    # nap done, sum stopped after one evaluation
    run(case_sweep_config(), tmp_path, budget=Budget(chunks=4))
  assert not os.path.exists(tmp_path / "summary.json")
  assert ([(row["grid"], row["step"]) for row in history(tmp_path)][-3:] ==
          [("nap", 30), ("sum", 10), ("sum", 10)])
  capsys.readouterr()
  run(case_sweep_config(), tmp_path)
  out = capsys.readouterr().out
  checkpoint = os.path.join(tmp_path, "checkpoints", "sum", "1")
  assert f"sum: resumed from step 10 (checkpoint {checkpoint})" in out
  finished = os.path.join(tmp_path, "checkpoints", "nap", "3")
  assert f"nap: finished, 3 of 3 chunks (checkpoint {finished})" in out
  timing = read(tmp_path, "timing.json")["grids"]  # the finished grid is not compiled again
  assert (timing["nap"]["compiles"], timing["sum"]["compiles"]) == (0, 2)
  assert read(tmp_path) == read(reference)
  assert history_bytes(tmp_path) == history_bytes(reference)


# rows past the restored checkpoint, logged once: test_workdir's
# test_sweep_resumes_past_a_damaged_latest_checkpoint (restored from the one before the last)
@pytest.mark.slow
def test_rows_past_the_last_checkpoint_are_logged_once(reference, tmp_path):
  """Checkpoints every second evaluation: the killed run logged sum's evaluation 1 past its
  last checkpoint (none); the resumed run trains and logs it again, once."""
  config = case_sweep_config(**{"train.checkpoint_every": 2})
  with pytest.raises(Interrupted):
    run(config, tmp_path, budget=Budget(chunks=4))
  run(config, tmp_path)
  assert history_bytes(tmp_path) == history_bytes(reference)


@pytest.mark.parametrize("every", [2, 0])
@pytest.mark.fast_subset(  # checkpoints off takes the time stop's save and resume and more
    lambda p: p["every"] == 0)
def test_a_sweep_stopped_by_time_keeps_its_last_chunk_and_resumes(reference, tmp_path, every):
  """--max_minutes (the GPU queue's way to end a loan's sweep): the chunk that passed the time
  is checkpointed though it is no checkpoint_every multiple, and even with checkpoints off (0,
  where the rerun started over), and the rerun ends as one run: the reference's rows of its
  grid (a model's keys are its seed's, whatever else the sweep holds)."""
  config = case_sweep_config(archs=("nap",), **{"train.checkpoint_every": every})
  with pytest.raises(Interrupted, match="out of time after 1 of"):
    run(config, tmp_path, budget=Budget(minutes=1e-9))
  [grid] = os.listdir(tmp_path / "checkpoints")
  assert sorted(os.listdir(tmp_path / "checkpoints" / grid)) == ["1"]
  run(config, tmp_path)
  assert history_bytes(tmp_path) == grid_rows(reference, "nap")


def test_a_finished_run_rerun_draws_only_its_missing_figures(reference, tmp_path, monkeypatch):
  """A rerun of a finished sweep returns its summary; of its figures only a missing one is
  drawn (the others keep their bytes and times), and a read-only workdir is left alone."""
  import shutil

  from normattn_jax.cli import command as cli
  workdir = tmp_path / "finished"
  shutil.copytree(reference, workdir)
  config, flags_ = case_sweep_config(), run_flags(workdir)
  figures = ("accuracy.png", "case_accuracy.png", "learning_curves.png")
  assert cli.run_kind(config, flags_) == read(reference)
  kept = {name: (workdir / name).stat().st_mtime_ns for name in figures}
  (workdir / "learning_curves.png").unlink()
  cli.run_kind(config, flags_)
  assert (workdir / "learning_curves.png").exists()
  for name in ("accuracy.png", "case_accuracy.png"):
    assert (workdir / name).stat().st_mtime_ns == kept[name]
  (workdir / "accuracy.png").unlink()
  monkeypatch.setattr(cli.os, "access", lambda path, mode: False)  # a read-only mount
  assert cli.run_kind(config, flags_) == read(reference)
  assert not (workdir / "accuracy.png").exists()


def test_the_budget_stops_before_a_chunk_it_cannot_pay():
  budget = Budget(2)
  budget.check("nap", 0, 3)
  budget.spend()
  budget.spend()
  budget.check("nap", 3, 3)  # that grid is done: nothing to stop
  with pytest.raises(Interrupted, match="nap: stopped after 1 of 3"):
    budget.check("nap", 1, 3)
  Budget(None).check("nap", 0, 3)


def test_a_budget_of_minutes_stops_after_the_chunk_that_passes_them():
  now = [0.0]
  budget = Budget(minutes=1.5, clock=lambda: now[0])
  budget.check("lm", 0, 3)
  budget.spend()
  now[0] = 89.0
  budget.check("lm", 1, 3)
  budget.spend()
  now[0] = 90.0
  budget.check("lm", 3, 3)  # done: nothing to stop
  with pytest.raises(Interrupted, match="lm: out of time after 2 of 3"):
    budget.check("lm", 2, 3)


def test_a_budget_of_minutes_lets_each_call_run_a_chunk():
  """A call that starts past its minutes (compiling took them) still trains one chunk."""
  now = [0.0]
  budget = Budget(minutes=1.0, clock=lambda: now[0])
  now[0] = 600.0
  budget.check("lm", 1, 3)
  budget.spend()
  with pytest.raises(Interrupted, match="out of time after 2 of 3"):
    budget.check("lm", 2, 3)


def test_a_grid_of_a_steps_scaled_sweep_validates_as_it_is():
  """Fig. 13's batch sizes, each with its own steps (scaled once): the point, not the sweep
  again, is validated."""
  from normattn_jax.configs import fig13_case_lr_x_batch
  c = fig13_case_lr_x_batch.get_config()
  validate(c)
  points = [point_config(c, values) for values in static_points(c)]
  for point in points:
    validate(point)
  assert ([(p.train.batch_size, p.train.num_steps, p.train.eval_every) for p in points[-3:]] ==
          [(32, 3200, 100), (64, 1600, 50), (128, 800, 25)])
  assert all(p.sweep.name == "" for p in points)


def test_a_diverging_model_does_not_disturb_the_others(reference, tmp_path):
  """Learning rate 0.001, seed 0 beside a diverging model trains as in the reference sweep,
  beside three others (a model's keys are its seed's)."""
  together = case_sweep_config(archs=("nap",), learning_rates=(1e30, 0.001), num_seeds=1)
  together.train.checkpoint_every = 0
  run(together, tmp_path / "together")
  a = np.load(reference / "metrics.npz")  # [evals, lr, swept, seed]: lr 0.001 first
  t = np.load(tmp_path / "together" / "metrics.npz")
  assert t["nap/diverged"][-1, 0].all() and not t["nap/diverged"][-1, 1].any()
  assert (t["nap/val_acc"][:, 0] == 0).all()
  np.testing.assert_allclose(t["nap/train_loss"][:, 1], a["nap/train_loss"][:, 0, :, :1],
                             rtol=1e-5)
  np.testing.assert_allclose(t["nap/val_acc"][:, 1], a["nap/val_acc"][:, 0, :, :1])
  cells = read(tmp_path / "together")["cells"]
  assert [c["diverged"] for c in cells] == [1, 0]


@pytest.mark.slow  # the vmapped sweep: test_a_dropout_sweep_is_one_program_with_each_rates_numbers
def test_vmapped_l2_sweep(tmp_path):
  c = case_sweep_config(archs=("mte",), num_seeds=1)
  c.sweep.name, c.sweep.grid = "train.l2", (0.0, 0.1)
  summary = run(c, tmp_path / "l2")
  assert sorted(cell["params"]["train.l2"] for cell in summary["cells"]) == [0, 0, 0.1, 0.1]


def test_static_sweep(tmp_path):
  c = tiny_sweep_config(archs=("max",), num_seeds=1, learning_rates=(0.001,))
  c.sweep.name, c.sweep.grid = "model.d_model", (4, 8)
  summary = run(c, tmp_path / "d")
  assert sorted(cell["params"]["model.d_model"] for cell in summary["cells"]) == [4, 8]
  assert "max[model.d_model=4]/val_acc" in np.load(tmp_path / "d" / "metrics.npz")
  with pytest.raises(ValueError, match=r"value=16: the sweep's are \(4, 8\)"):
    load_model(str(tmp_path / "d"), "max", 0.001, value=16)


def test_a_dropout_sweep_is_one_program_with_each_rates_numbers(tmp_path):
  c = case_sweep_config(archs=("mte",), num_seeds=1, learning_rates=(0.003,))
  c.sweep.name, c.sweep.grid = "train.dropout", (0.0625, 0.25)
  run(c, tmp_path / "in")
  # a program per rate (the layout of sweeps stored before), for the second rate: its models are
  # the second of the folded program's values, not the first
  c.sweep.in_program, c.sweep.grid = False, (0.25,)
  run(c, tmp_path / "out")
  folded, static = (np.load(tmp_path / name / "metrics.npz") for name in ("in", "out"))
  for name in ("train_loss", "val_acc"):
    np.testing.assert_array_equal(folded[f"mte/{name}"][:, :, 1],  # [evals, lr, value, seed]
                                  static[f"mte[train.dropout=0.25]/{name}"][:, :, 0])
    assert not np.array_equal(folded[f"mte/{name}"][:, :, 0], folded[f"mte/{name}"][:, :, 1])
  c.sweep.name, c.sweep.grid = "train.l2", (0.0, 0.1)
  with pytest.raises(ValueError, match=r"config.sweep.in_program=False: train.l2 is swept "):
    validate(c)


def test_majority_task_trains_with_a_class_per_token(tmp_path):
  c = case_sweep_config(archs=("mte",), num_seeds=1, learning_rates=(0.01,))
  c.task.update(name="majority", output="token_classes", vocab_size=5, min_margin=2)
  c.model.positional = False
  summary = run(c, tmp_path)
  acc = summary["cells"][0]["metrics"]["val_acc"]["mean"]
  assert 0.0 <= acc <= 1.0 and "case_acc_first" not in summary["cells"][0]["metrics"]


@pytest.mark.parametrize("field,value,match", [
    ("archs", ("nap", "gpt"), "config.archs"),
    ("learning_rates", (), "config.learning_rates"),
    ("num_seeds", 0, "config.num_seeds"),
    ("task.name", "sorting", "config.task.name"),
    ("task.output", "classes", "config.task.output"),
    ("task.vocab_size", 60, "config.task.vocab_size"),
    ("model.num_heads", 3, "config.model.num_heads"),
    ("train.eval_every", 7, "config.train.eval_every"),
    ("train.dropout", 1.0, "config.train.dropout"),
    ("sweep.name", "model.width", "config.sweep.name"),
    ("attention.name", "dnas", "config.attention.name"),
    ("attention.name", "gpt", "config.attention.name='gpt'.*must be one of"),
    ("attention.options", {"sinkhorn_iters": 2}, "config.attention.options.*need a normalis"),
    ("train.nosuch", 1, "config.train.nosuch=1: no such field"),
    ("train.l2", float("nan"), r"config.train.l2=nan: must be a finite number >= 0"),
    ("train.l2", float("inf"), r"config.train.l2=inf: must be a finite number >= 0"),
    ("train.checkpoint_minutes", -1.0, r"config.train.checkpoint_minutes=-1.0: must be .*>= 0"),
    ("learning_rates", (0.01, float("inf")), r"config.learning_rates\[1\]=inf: .*finite"),
    ("learning_rates", (1e999,), r"config.learning_rates\[0\]=inf: .*finite"),
    ("learning_rates", (float("nan"),), r"config.learning_rates\[0\]=nan: .*finite"),
])
def test_invalid_config_fails_before_compiling_and_writes_nothing(field, value, match, tmp_path):
  config = case_sweep_config(**{field: value})
  with pytest.raises(ValueError, match=match):
    run(config, tmp_path / "run")
  assert not os.path.exists(tmp_path / "run")


def test_static_sweep_values_are_validated():
  c = case_sweep_config()
  c.sweep.name, c.sweep.grid = "model.d_model", (8, 5)
  with pytest.raises(ValueError, match="model.num_heads"):
    validate(c)


@pytest.mark.parametrize("name,values,match", [
    ("train.l2", (0.0, -0.1), r"config.sweep.grid\[1\]=-0.1 \(as train.l2\): "
                              r"config.train.l2=-0.1: must be >= 0"),
    ("model.d_model", (8, 16.5), r"grid\[1\]=16.5 .*config.model.d_model=16.5: .*integer"),
    ("model.num_layers", (2.0,), r"grid\[0\]=2.0 .*config.model.num_layers=2.0: .*integer"),
    ("train.dropout", (0.0, 1.0), r"grid\[1\]=1.0 .*config.train.dropout=1.0: must lie"),
    ("model.d_model", (8, 5), r"grid\[1\]=5 \(as model.d_model\): config.model.num_heads=2"),
    ("train.batch_size", (4, 3), r"grid\[1\]=3 .*config.train.eval_every=13: must divide"),
])
def test_each_swept_value_passes_the_rules_of_its_field(name, values, match):
  c = case_sweep_config()
  c.sweep.name, c.sweep.grid = name, values
  if name == "train.batch_size":  # at batch 3, 30 x 4 / 3 = 40 steps and 13 between evaluations
    c.sweep.steps_scale, c.sweep.steps_reference = "inverse", 4
  with pytest.raises(ValueError, match=match):
    validate(c)


def test_a_bad_swept_value_fails_before_compiling_and_writes_nothing(tmp_path):
  c = case_sweep_config()
  c.sweep.name, c.sweep.grid = "train.l2", (0.0, -0.1)
  with pytest.raises(ValueError, match=r"sweep.grid\[1\]"):
    run(c, tmp_path / "run")
  assert not os.path.exists(tmp_path / "run")


def test_optimizer_is_adam_with_linear_decay_and_per_model_learning_rate():
  params = {"w": jnp.arange(3.0), "b": jnp.ones((2, 2))}
  grads = [jax.tree.map(lambda p, i=i: jnp.sin(p + i), params) for i in range(4)]
  lr, steps = 0.05, 4
  ours = make_optimizer(steps)
  reference = optax.adam(optax.linear_schedule(lr, 0.0, steps), b1=0.9, b2=0.999, eps=1e-7)
  s1, s2 = with_learning_rate(ours.init(params), lr), reference.init(params)
  # one program each (op by op, each operation compiles)
  ours_update, reference_update = jax.jit(ours.update), jax.jit(reference.update)
  for g in grads:
    u1, s1 = ours_update(g, s1, params)
    u2, s2 = reference_update(g, s2, params)
    chex.assert_trees_all_close(u1, u2, atol=1e-7)
  assert float(learning_rate_of(s1)) == pytest.approx(lr)
  # the learning rate is state: one optimiser, built once, and a learning rate per model
  states = jax.jit(jax.vmap(lambda r: with_learning_rate(ours.init(params), r)))(
      jnp.array([0.1, 0.2]))
  u, _ = jax.jit(jax.vmap(lambda s: ours.update(grads[0], s, params)))(states)
  np.testing.assert_allclose(u["w"][1], 2 * u["w"][0], rtol=1e-6)


def test_bert_warmup_hands_over_to_a_decay_that_began_at_step_0():
  """The NAP code's BERT schedule (from the BERT code): 0 -> 1 over the warm-up, then 1 - t/T."""
  shape = schedule_shape(num_steps=100, warmup_steps=10)
  np.testing.assert_allclose([float(shape(t)) for t in (0, 5, 9, 10, 50, 100)],
                             [0.0, 0.5, 0.9, 0.9, 0.5, 0.0], rtol=1e-6)


def test_per_tensor_clipping():
  g = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([0.3, 0.4])}
  clipped, _ = clip_by_tensor_norm(1.0).update(g, optax.EmptyState())
  np.testing.assert_allclose(clipped["a"], [0.6, 0.8], rtol=1e-6)
  np.testing.assert_allclose(clipped["b"], [0.3, 0.4], rtol=1e-6)


@pytest.mark.slow  # its own process; sharding over devices: test_distributed, test_retrain_arch
def test_eight_devices_give_the_same_result_as_one(reference, tmp_path):
  """Each model's arithmetic is the same whichever device holds it, up to the order of float
  operations inside XLA's kernels; the learning rates here are ones where Adam does not
  amplify that rounding into a different trajectory."""
  script = textwrap.dedent(f"""
      import jax
      assert jax.device_count() == 8, jax.devices()
      from helpers.sweeps import run, case_sweep_config
      run(case_sweep_config(), {str(tmp_path)!r})
  """)
  env = subprocess_env(TESTS, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
                       + " --xla_force_host_platform_device_count=8")
  subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=REPO)
  one = np.load(os.path.join(reference, "metrics.npz"))
  eight = np.load(tmp_path / "metrics.npz")
  assert set(one) == set(eight)
  for key in one:
    np.testing.assert_allclose(eight[key], one[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_the_widest_vmap_within_a_memory_budget():
  assert width_within(50, 100, 2_000) == 20
  assert width_within(50, 100, 1_000_000) == 50  # the whole share fits
  assert width_within(50, 100, 50) == 1  # one model is the least, whatever the budget


def test_a_programs_memory_grows_with_its_batch_and_a_cpu_takes_one_model_per_vmap():
  c = base_config()
  c.model.update(d_model=16, num_heads=2, num_layers=0)  # no block: a shorter compile
  c.task.update(seq_len=8)
  sizes = []
  for batch in (8, 64):
    c.train.batch_size = batch
    programs = make_programs(Setup("mte", c))
    hp = {"learning_rate": jnp.float32(1e-3), "l2": jnp.float32(0.0), "dropout": jnp.float32(0.0)}
    state = jax.eval_shape(programs.init, jax.random.key_data(jax.random.key(0)), hp)
    sizes.append(program_bytes(lambda s, h: programs.train_step(s, h)[0], state, hp))
  assert 0 < sizes[0] < sizes[1]
  assert models_per_vmap(c.train.models_per_vmap, 50) == 1


def test_a_trained_model_loads_back_as_a_module_and_scores_as_stored(reference):
  from normattn_jax.sweep import artifacts
  from normattn_jax.sweep.programs import eval_sets_for
  from normattn_jax.sweep.layout import ModelsAxis
  config = artifacts.read_config(str(reference))
  curves = artifacts.read_results(str(reference), SweepPlan.of(config))[("nap", ())]
  setup = Setup("nap", config)
  (inputs, labels), = eval_sets_for(setup, config.seed)  # the case sets at N: [case, ...]
  both = config.copy_and_resolve_references()
  both.eval.validation_case_sets = True  # and at the validation length, the N sets unchanged
  at_n, at_validation = eval_sets_for(Setup("nap", both), config.seed)
  np.testing.assert_array_equal(at_n[0], inputs)
  assert at_validation[0].shape[-1] == setup.val_len
  model = setup.model()
  accuracy = jax.jit(lambda variables, tokens, answers: jnp.mean(  # one program (op by op, each
      jnp.argmax(model.apply(variables, tokens), -1) == answers))  # operation compiles)
  for lr_index, seed in ((0, 0), (1, 1)):
    module, variables = load_model(str(reference), "nap", config.learning_rates[lr_index], seed)
    assert module == model
    row = ModelsAxis.of(config).rows(lr_index, 0)[seed]
    for case, name in enumerate(setup.task.grouped_eval.metric_names(False)):
      tokens, answers = (x[case].reshape((-1,) + x.shape[3:]) for x in (inputs, labels))
      np.testing.assert_allclose(accuracy(variables, tokens, answers), curves[name][-1, row],
                                 atol=1e-6)
  with pytest.raises(ValueError, match=r"learning_rate=0.5: the sweep's are \(0.001, 0.0003\)"):
    load_model(str(reference), "nap", 0.5)
  with pytest.raises(ValueError, match="seed=2: the sweep trained seeds 0..1"):
    load_model(str(reference), "nap", 0.001, seed=2)
  with pytest.raises(ValueError, match="value=64: the sweep's values are none"):
    load_model(str(reference), "nap", 0.001, value=64)


def test_a_report_cards_arm_reads_the_models_load_model_gives(reference):
  """The report card finds an arm's final models through its evaluation sweep's plan (its
  grid's checkpoints, its first learning rate's rows): the ones ``load_model`` gives, seed by
  seed."""
  from normattn_jax.card import train as rc
  arm = rc.Arm("card", str(reference), str(reference), "nap")
  config, params, setup = rc.final_states(arm)
  learning_rate = arm.sweep().learning_rates[0]
  assert len(params) == config.num_seeds == 2
  for seed, found in enumerate(params):
    module, variables = load_model(str(reference), "nap", learning_rate, seed)
    assert module == setup.model()
    chex.assert_trees_all_close(found, variables, rtol=0, atol=0)


def test_an_evaluation_on_non_finite_logits_counts_as_diverged():
  """An infinite learning rate: the one step's loss is finite, the evaluation after it runs on
  NaN parameters. That model is flagged and scores 0 everywhere; its peer is untouched."""
  from normattn_jax.train.grid import model_keys
  from normattn_jax.sweep.programs import train_grid
  c = tiny_sweep_config(archs=("mte",), num_seeds=1, learning_rates=(0.001,),
                        **{"train.num_steps": 1, "train.eval_every": 1})
  hp = {"learning_rate": np.array([np.inf, 1e-3], np.float32), "l2": np.zeros(2, np.float32),
        "dropout": np.zeros(2, np.float32)}
  metrics = train_grid(c, "mte", hyperparameters=hp, keys=model_keys(0, np.zeros(2, int))).metrics
  assert metrics["diverged"][-1].tolist() == [True, False]
  for name, curve in metrics.items():
    if name.endswith("_acc") or name.startswith("case_"):
      assert curve[-1, 0] == 0, name
  assert metrics["val_acc"][-1, 1] > 0


def test_a_diverged_model_scores_as_failed_at_every_evaluation():
  """Seed 1 scored 0.34 before it diverged: its cell counts it as failed throughout, and a
  learning rate whose every model diverged is never the best."""
  c = case_sweep_config(archs=("nap",), learning_rates=(0.01, float("inf")))
  curve = lambda *evals: np.array(evals, np.float32)  # [evals, lr x seed]
  history = {"train_acc": curve([0.2, 0.3, 0.5, 0.6], [0.3, 0.2, 0.0, 0.0]),
             "val_acc": curve([0.2, 0.3, 0.34, 0.34], [0.3, 0.2, 0.0, 0.0]),
             "train_loss": curve([2.0, 1.0, 1.0, 1.0], [1.0, 1.0, np.nan, np.nan]),
             "diverged": np.array([[0, 0, 0, 0], [0, 1, 1, 1]], bool)}
  first, second = summarise(SweepPlan.of(c), {("nap", ()): history})["cells"]
  assert first["diverged"] == 1
  assert first["metrics"]["val_acc"] == {"min": 0.0, "mean": pytest.approx(0.15),
                                         "max": pytest.approx(0.3)}
  assert first["metrics"]["train_loss"]["mean"] is None
  assert second["diverged"] == 2
  assert second["metrics"]["val_acc"] == {"min": 0.0, "mean": 0.0, "max": 0.0}
  best = summarise(SweepPlan.of(c), {("nap", ()): history})["best"]["nap"]
  assert best["learning_rate"] == 0.01 and best["val_learning_rate"] == 0.01
  assert best["train_learning_rate"] == 0.01


@pytest.mark.parametrize("name, grid, match", [
    ("train.l2", (0.0, float("nan")), r"config.sweep.grid\[1\]=nan: must be a finite number"),
    ("model.d_model", (8, float("inf")), r"config.sweep.grid\[1\]=inf: must be a finite number"),
])
def test_a_non_finite_swept_value_is_refused_by_its_index(name, grid, match):
  c = case_sweep_config()
  c.sweep.name, c.sweep.grid = name, grid
  with pytest.raises(ValueError, match=match):
    validate(c)


def test_a_non_finite_steps_reference_is_refused():
  import ml_collections
  c = case_sweep_config()
  c.sweep = ml_collections.ConfigDict(dict(name="train.batch_size", grid=(4, 8),
                                           steps_scale="inverse", steps_reference=float("inf"),
                                           in_program=True))
  with pytest.raises(ValueError, match=r"config.sweep.steps_reference=inf: .*finite"):
    validate(c)


def test_the_engine_refuses_bad_widths_and_models_axes_before_tracing():
  """Grid.of took a negative, fractional or boolean width and no models at all (an anonymous
  TypeError in a reshape, or a run of nothing); run_grid padded too few keys with other models'
  keys and failed on too many inputs with "negative dimensions"."""
  from normattn_jax.train.grid import Grid, run_grid
  init = lambda key, hp: {"w": jnp.zeros(3) + hp}
  chunk = lambda state, hp: ({"w": state["w"] + hp}, {"loss": jnp.sum(state["w"])})
  for kwargs, said in ((dict(num_models=0), "num_models must be a positive integer, got 0"),
                       (dict(num_models=3, per_vmap=-1), "per_vmap must be an integer >= 0"),
                       (dict(num_models=3, per_vmap=1.5), "per_vmap must be an integer >= 0"),
                       (dict(num_models=3, per_vmap=True), "per_vmap must be an integer >= 0")):
    with pytest.raises(ValueError, match=re.escape(said)):
      Grid.of(init, chunk, **kwargs)
  grid = Grid.of(init, chunk, 3, 1)
  keys, hp = np.zeros((3, 2), np.uint32), np.ones(3, np.float32)
  for args, said in (((keys[:2], hp, 2), "keys has shape (2, 2): its leading axis must be the "
                                         "grid's 3 models"),
                     ((keys, {"lr": np.ones(5)}, 2), "per_model (chunk 0)['lr'] has shape (5,)"),
                     ((keys, lambda i: np.ones(3 + i), 2), "per_model (chunk 1) has shape (4,)"),
                     ((keys, hp, -1), "num_chunks must be an integer >= 0, got -1")):
    with pytest.raises(ValueError, match=re.escape(said)):
      run_grid(grid, *args)


# One compile per grid, compiled ahead; chunks, grids and checkpoints without idle devices

def tiny_engine_programs():
  """A model of three numbers, each chunk adding its hyper-parameter: exact arithmetic."""
  init = lambda key, hp: {"w": jnp.zeros(3) + hp}
  chunk = lambda state, hp: ({"w": state["w"] + hp}, {"loss": jnp.sum(state["w"])})
  return init, chunk, jax.ShapeDtypeStruct((), jnp.float32)


def test_an_accelerators_auto_width_comes_from_its_own_programs_memory(monkeypatch, capsys):
  """An accelerator's auto width (its share of 4 models per device, stood in for on the CPU)
  compiles the chunk at the share; only where XLA's analysis of that very program exceeds the
  memory budget is it compiled once more, at the width the analysis allows, and said so. No
  separate measurement is compiled, and a width asked for is not measured."""
  from normattn_jax.train import grid as grid_lib
  from normattn_jax.train.grid import Grid, fitted_width, run_grid
  init, chunk, hp = tiny_engine_programs()
  monkeypatch.setattr(grid_lib, "models_per_vmap", lambda asked, models, devices: asked or 4)
  at_share = Grid.at_width(init, chunk, 4, 4, (), grid_lib.grid_mesh(), hp)
  needed = grid_lib.executable_bytes(at_share.compiled.chunk)
  monkeypatch.setattr(grid_lib, "memory_budget", lambda: needed)
  roomy = Grid.of(init, chunk, 4, per_model=hp)
  assert (roomy.per_vmap, roomy.compiles.count) == (4, 2)
  monkeypatch.setattr(grid_lib, "memory_budget", lambda: needed // 2)
  tight = Grid.of(init, chunk, 4, per_model=hp)
  assert tight.per_vmap == fitted_width(4, needed, needed // 2) < 4
  assert tight.compiles.count == 4  # init and chunk at the share, then at the narrower width
  assert f"compiling again at {tight.per_vmap} per vmap" in capsys.readouterr().out
  assert Grid.of(init, chunk, 4, 3, per_model=hp).compiles.count == 2
  keys, values = np.zeros((4, 2), np.uint32), np.arange(4, dtype=np.float32)
  for name, curve in run_grid(roomy, keys, values, 2).metrics.items():
    np.testing.assert_array_equal(run_grid(tight, keys, values, 2).metrics[name], curve)


def test_a_width_fitted_to_memory_keeps_what_fits():
  """4 models needing 1000 bytes: all fit 2000, two fit 600 (250 each), one at least."""
  from normattn_jax.train.grid import fitted_width
  assert [fitted_width(4, 1000, budget) for budget in (2000, 600, 10)] == [4, 2, 1]


def test_a_chunk_dispatched_before_the_last_ones_metrics_are_read_changes_nothing():
  """``run_grid``'s ``state_needed``: where it says no, the next chunk runs before the host reads
  the last one's metrics and ``on_chunk`` gets no state; the numbers are those of one chunk
  after another, and a state handed over is the one after its chunk."""
  from normattn_jax.train.grid import Grid, run_grid
  init, chunk, hp = tiny_engine_programs()
  grid = Grid.of(init, chunk, 3, 1, per_model=hp)
  keys, values = np.zeros((3, 2), np.uint32), np.array([1.0, 2.0, 3.0], np.float32)
  seen = []

  def on_chunk(done, state, metrics):
    seen.append((done, None if state is None else np.asarray(state["w"])[:3, 0].tolist()))
  plain = run_grid(grid, keys, values, 4)
  ahead = run_grid(grid, keys, values, 4, on_chunk=on_chunk, state_needed=lambda done: done == 2)
  assert seen == [(1, None), (2, [3.0, 6.0, 9.0]), (3, None), (4, [5.0, 10.0, 15.0])]
  np.testing.assert_array_equal(ahead.metrics["loss"], plain.metrics["loss"])
  np.testing.assert_array_equal(ahead.state["w"], plain.state["w"])


def test_a_timed_checkpoint_follows_the_chunk_that_passes_its_minutes(tmp_path):
  """``train.checkpoint_minutes`` (here 1, chunks of 40 s on a stand-in clock, no periodic
  checkpoints): chunks 1 and 2 ran ahead of their metrics, so the minute that passed in chunk 2
  is checkpointed after chunk 3, whose state is kept; then after the last (80 s later). Each
  checkpoint holds the state and metrics of its chunk."""
  from normattn_jax.train.checkpoint import GridCheckpoints
  from normattn_jax.train.driver import RunHooks
  from normattn_jax.train.grid import Grid
  init, chunk, hp = tiny_engine_programs()
  grid = Grid.of(init, chunk, 2, 1, per_model=hp)
  now = [0.0]

  def record(indices, metrics):
    now[0] += 40.0 * len(indices)
  folder = str(tmp_path / "checkpoints")
  hooks = RunHooks(folder, 0, 5, record=record, budget=Budget(clock=lambda: now[0]), minutes=1.0)
  run = hooks.train(grid, np.zeros((2, 2), np.uint32), np.array([1.0, 2.0], np.float32))
  assert sorted(int(step) for step in os.listdir(folder)) == [3, 5]
  checkpoints = GridCheckpoints(folder)
  third = checkpoints.restore(3, None)
  checkpoints.close()
  np.testing.assert_array_equal(third["state"]["w"][:, 0], [4.0, 8.0])  # init, then 3 chunks
  np.testing.assert_array_equal(third["metrics"]["loss"][:3], run.metrics["loss"][:3])
  assert not third["metrics"]["loss"][3:].any()  # the rows of later chunks, not yet run
  with pytest.raises(ValueError, match="minutes must be >= 0, got -1"):
    RunHooks(folder, 0, 5, minutes=-1)


def test_a_checkpoint_holds_what_was_given_whatever_happens_after_save_returns(tmp_path):
  """Saves are asynchronous: the metrics the run goes on writing in place and the state it
  donates to its next chunk right after ``save`` returns are not what is written; a restore
  waits for the save."""
  from normattn_jax.train.checkpoint import GridCheckpoints
  checkpoints = GridCheckpoints(str(tmp_path))
  state, metrics = jnp.arange(4.0), np.zeros((3, 2), np.float32)
  metrics[0] = 1.0
  checkpoints.save(1, {"state": state, "metrics": {"loss": metrics}})
  metrics[1] = 7.0
  jax.jit(lambda x: x * 0 - 1, donate_argnums=0)(state)
  step, tree = checkpoints.restore_newest({"state": jnp.zeros(4), "metrics": None})
  checkpoints.close()
  assert step == 1
  np.testing.assert_array_equal(tree["state"], np.arange(4.0))
  np.testing.assert_array_equal(tree["metrics"]["loss"], [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])


def test_a_finished_run_is_read_from_its_last_checkpoint_without_a_grid(tmp_path):
  """``RunHooks.finished`` (a resumed sweep's finished grids, not compiled): the metrics of the
  last chunk's checkpoint, recorded as a resume records them; None with chunks left, and where
  the last checkpoint does not restore (the run then resumes from the one before)."""
  import shutil
  import warnings

  from normattn_jax.train.checkpoint import DamagedCheckpointWarning, GridCheckpoints
  from normattn_jax.train.driver import RunHooks
  folder = str(tmp_path / "run")
  checkpoints = GridCheckpoints(folder)
  for done in (2, 3):
    checkpoints.save(done, {"state": {"w": jnp.full(2, float(done))},
                            "metrics": {"loss": np.full((3, 2), float(done), np.float32)}})
  checkpoints.close()
  recorded = []

  def hooks(chunks):
    return RunHooks(folder, 1, chunks, record=lambda indices, metrics: recorded.append(
        (list(indices), float(metrics["loss"][0, 0]))))
  with hooks(4) as unfinished:
    assert unfinished.finished() is None and not recorded
  with hooks(3) as finished:
    metrics = finished.finished()
  np.testing.assert_array_equal(metrics["loss"], np.full((3, 2), 3.0))
  assert recorded == [([0, 1, 2], 3.0)]
  for item in os.listdir(os.path.join(folder, "3")):  # the last checkpoint's files lost
    shutil.rmtree(os.path.join(folder, "3", item), ignore_errors=True)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DamagedCheckpointWarning)
    with hooks(3) as damaged:
      assert damaged.finished() is None


def test_a_sweeps_timing_counts_each_grids_init_and_chunk_compiled_once(reference):
  """timing.json: per grid, its init and chunk compiled when it was built, and nothing compiled
  while it trained."""
  grids = read(reference, "timing.json")["grids"]
  assert list(grids) == ["nap", "sum"]
  for timing in grids.values():
    assert timing["compiles"] == 2 and timing["compiled"] == ["jit(init)", "jit(chunk)"]
    assert timing["train_seconds"] >= timing["checkpoint_seconds"] > 0


def test_grids_train_longest_first_the_later_ones_compiled_ahead_an_error_in_its_turn(
    monkeypatch):
  """The sweep trains its grids longest first, compiling every later grid in a background
  thread while the first trains; a compile that fails raises in the training thread when its
  grid's turn comes, after the grids before it trained; the results come in the plan's order."""
  import threading

  from normattn_jax.sweep import train as sweep_train
  from normattn_jax.train.timing import GridTiming
  third_building, trained, failing = threading.Event(), [], {"sum[model.d_model=8]"}

  def build(plan, grid):
    if grid.name == "nap[model.d_model=8]":
      third_building.set()
    if grid.name in failing:
      raise RuntimeError(f"{grid.name} does not compile")
    return grid.name, GridTiming()

  def train(plan, grid, workdir, log, budget, built, timing):
    if not trained:
      assert third_building.wait(30), "the third grid was not compiled while the first trained"
    trained.append(built)
    return built
  monkeypatch.setattr(sweep_train, "build_point", build)
  monkeypatch.setattr(sweep_train, "train_point", train)
  plan = SweepPlan.of(case_sweep_config(**{
      "sweep.name": "model.d_model", "sweep.grid": (8, 16), "sweep.steps_scale": "proportional",
      "sweep.steps_reference": 8}))  # d = 16 trains twice the steps of d = 8
  with pytest.raises(RuntimeError, match=r"sum\[model.d_model=8\] does not compile"):
    sweep_train.train_grids(plan, "unused", log=None)
  assert trained == ["nap[model.d_model=16]", "sum[model.d_model=16]", "nap[model.d_model=8]"]
  failing.clear()
  results = sweep_train.train_grids(plan, "unused", log=None)
  assert list(results) == [grid.key for grid in plan.grids]
  assert [results[grid.key] for grid in plan.grids] == [grid.name for grid in plan.grids]


def test_beside_an_accelerator_two_grids_compile_at_once(monkeypatch):
  """Two compile threads where the devices are not the host's cores: the first two grids'
  builds meet while both run (one thread would leave the barrier waiting), the grids still
  train in their order; one thread on a CPU, and a count below one refused before any build."""
  import threading

  from normattn_jax.sweep import programs
  from normattn_jax.sweep import train as sweep_train
  from normattn_jax.train.timing import GridTiming
  both_building, trained = threading.Barrier(2, timeout=30), []

  def build(plan, grid):
    if plan.training_order.index(grid) < 2:
      both_building.wait()  # a BrokenBarrierError if the other build never starts
    return grid.name, GridTiming()

  def train(plan, grid, workdir, log, budget, built, timing):
    trained.append(built)
    return built
  monkeypatch.setattr(sweep_train, "build_point", build)
  monkeypatch.setattr(sweep_train, "train_point", train)
  monkeypatch.setattr(programs.jax, "default_backend", lambda: "gpu")
  plan = SweepPlan.of(case_sweep_config(**{"sweep.name": "model.d_model", "sweep.grid": (8, 16)}))
  results = sweep_train.train_grids(plan, "unused", log=None)
  assert trained == [grid.name for grid in plan.training_order]
  assert [results[grid.key] for grid in plan.grids] == [grid.name for grid in plan.grids]
  assert (programs.compile_threads(), programs.compile_threads("cpu")) == (2, 1)
  monkeypatch.setattr(programs, "COMPILE_THREADS", 0)
  with pytest.raises(ValueError, match="COMPILE_THREADS must be None or an int >= 1, got 0"):
    sweep_train.train_grids(plan, "unused", log=None)
