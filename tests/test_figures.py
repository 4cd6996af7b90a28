"""The sweep figures draw the task's metric groups (``Task.metric_groups``): the case task's as
the NAP paper does (R/G/B = argmin / first / argmax), a group of another size in grey, a task
without groups without them. Drawn from made-up curves, no training."""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib.colors import to_rgb

from normattn_jax import tasks
from normattn_jax.reporting import figures
from normattn_jax.sweep import artifacts
from normattn_jax.sweep.layout import ModelsAxis
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.scoring import summarise
from helpers.sweeps import case_sweep_config

BASE = ("train_acc", "val_acc", "train_loss", "diverged")
# What the figures hold is checked, not their pixels: they are written at a low resolution.
DPI = 20


def made_up_results(config, metrics):
  """Distinct curves ``[evals, models]`` per arch and metric, no model diverged."""
  axis = ModelsAxis.of(config)
  evals = config.train.num_steps // config.train.eval_every
  rng = np.random.default_rng(0)
  results = {}
  for arch in config.archs:
    curves = {name: rng.uniform(size=(evals, axis.num_models)).astype(np.float32)
              for name in metrics}
    curves["diverged"] = np.zeros((evals, axis.num_models), bool)
    results[(arch, ())] = curves
  return results


def keep_drawn(monkeypatch) -> dict:
  """The figures saved from now on, by file, written at ``DPI``. Closing a figure only takes it
  out of pyplot's list, so a closed one can still be read."""
  drawn = {}
  save = figures.plt.Figure.savefig
  monkeypatch.setattr(figures.plt.Figure, "savefig",
                      lambda fig, path, **kw: (drawn.__setitem__(os.path.basename(path), fig),
                                               save(fig, path, **dict(kw, dpi=DPI))))
  return drawn


def draw(config, metrics, workdir, monkeypatch):
  """Draw the sweep's figures of made-up curves; returns the summary and the figures by file."""
  results = made_up_results(config, metrics)
  plan = SweepPlan.of(config)
  summary = summarise(plan, results)
  metrics_path = os.path.join(workdir, artifacts.METRICS)
  artifacts.save_metrics(metrics_path, plan, results)
  drawn = keep_drawn(monkeypatch)
  figures.draw_sweep(plan, summary, metrics_path, str(workdir))
  return summary, drawn


@pytest.fixture(scope="module")
def case_sweep(tmp_path_factory):
  """The tiny case sweep's figures (``case_sweep_config``), drawn once for the tests that read
  them: its config, summary, figures by file and their folder."""
  config, workdir = case_sweep_config(), tmp_path_factory.mktemp("case_sweep")
  with pytest.MonkeyPatch.context() as monkeypatch:
    summary, drawn = draw(config, BASE + tasks.get("case_distinction").extra_metrics(), workdir,
                          monkeypatch)
  return config, summary, drawn, workdir


def titles(fig):
  return [ax.get_title() for ax in fig.axes]


def legend(ax):
  """(label, colour) of each curve of a panel."""
  return [(line.get_label(), to_rgb(line.get_color())) for line in ax.get_lines()]


def test_the_case_figure_is_the_papers(tmp_path, monkeypatch):
  config = case_sweep_config(**{"eval.validation_case_sets": True})
  case = tasks.get("case_distinction")
  summary, drawn = draw(config, BASE + case.extra_metrics(), tmp_path, monkeypatch)
  assert set(drawn) == {"accuracy.png", "case_accuracy.png", "learning_curves.png"}
  assert [t.split(":")[0] for t in titles(drawn["case_accuracy.png"])] == [
      "nap cases N=8", "sum cases N=8", "nap cases N=4", "sum cases N=4"]
  image = drawn["case_accuracy.png"].axes[2].images[0].get_array()  # nap at N/2
  for channel, case_name in enumerate(("argmin", "first", "argmax")):
    np.testing.assert_allclose(image[..., channel], figures.cell_grid(
        SweepPlan.of(config), summary, "nap", f"val_case_acc_{case_name}", "mean"))
  curves = drawn["learning_curves.png"].axes
  assert len(curves) == 4  # two rows, two archs
  assert legend(curves[2]) == [("case_acc_argmin", to_rgb("tab:red")),
                               ("case_acc_first", to_rgb("tab:green")),
                               ("case_acc_argmax", to_rgb("tab:blue"))]


@pytest.fixture
def parity_task():
  sample = lambda key, b, n, s: (jnp.zeros((b, n), jnp.int32), jnp.zeros(b, jnp.int32))
  task = tasks.register(tasks.Task(
      "first_parity", sample, outputs=("classes",), validation_length=lambda n: 2 * n,
      grouped_eval=tasks.GroupedEval("first_acc", ("even", "odd"), sample)))
  yield task
  tasks.unregister(task.name)


def test_a_group_of_two_is_drawn_as_its_mean_in_grey(parity_task, tmp_path, monkeypatch):
  config = case_sweep_config(**{"task.name": parity_task.name, "archs": ("mte",),
                                "eval.validation_case_sets": True})
  summary, drawn = draw(config, BASE + parity_task.extra_metrics(), tmp_path, monkeypatch)
  assert titles(drawn["case_accuracy.png"]) == ["mte cases N=8", "mte cases N=16"]
  assert [t.get_text() for t in drawn["case_accuracy.png"].texts][:1] == [
      "grey = the mean of even, odd accuracy, each the mean over seeds at its best over "
      "training."]
  image = drawn["case_accuracy.png"].axes[1].images[0].get_array()
  plan = SweepPlan.of(config)
  mean = np.mean([figures.cell_grid(plan, summary, "mte", f"val_first_acc_{group}", "mean")
                  for group in ("even", "odd")], axis=0)
  for channel in range(3):
    np.testing.assert_allclose(image[..., channel], mean, rtol=1e-6)
  assert ([label for label, _ in legend(drawn["learning_curves.png"].axes[1])] ==
          ["first_acc_even", "first_acc_odd"])


def test_a_task_without_groups_has_no_case_figure(tmp_path, monkeypatch):
  config = case_sweep_config(**{"task.name": "mode_finding", "task.output": "classes"})
  _, drawn = draw(config, BASE, tmp_path, monkeypatch)
  assert set(drawn) == {"accuracy.png", "learning_curves.png"}
  assert len(drawn["learning_curves.png"].axes) == 2  # one row, two archs
  assert not os.path.exists(tmp_path / "case_accuracy.png")


def test_learning_curves_are_drawn_at_their_points_own_steps(tmp_path, monkeypatch):
  config = case_sweep_config(**{"task.name": "mode_finding", "task.output": "classes",
                          "task.vocab_size": 8, "sweep.name": "task.vocab_size",
                          "sweep.grid": (32,), "sweep.steps_scale": "proportional",
                          "sweep.steps_reference": 8})  # 4x the steps at S = 32
  axis = ModelsAxis.of(config)
  evals = config.train.num_steps // config.train.eval_every
  curves = {name: np.full((evals, axis.num_models), 0.5, np.float32) for name in BASE[:3]}
  curves["diverged"] = np.zeros((evals, axis.num_models), bool)
  results = {(arch, (("task.vocab_size", 32),)): curves for arch in config.archs}
  metrics_path = os.path.join(tmp_path, artifacts.METRICS)
  plan = SweepPlan.of(config)
  artifacts.save_metrics(metrics_path, plan, results)
  drawn = keep_drawn(monkeypatch)
  figures.learning_curves_figure(plan, summarise(plan, results), metrics_path,
                                 os.path.join(tmp_path, "curves.png"))
  x = drawn["curves.png"].axes[0].lines[0].get_xdata()
  np.testing.assert_array_equal(x, [40, 80, 120])  # not the reference's 10, 20, 30


def test_the_pixel_plots_carry_a_key_and_label_a_single_column(case_sweep):
  """Without a sweep each plot is one column: it is labelled, not left blank; the key says what
  R, G and B are (the NAP paper's: min, mean and max over seeds)."""
  _, _, drawn, _ = case_sweep
  accuracy, cases = drawn["accuracy.png"], drawn["case_accuracy.png"]
  assert [t.get_text() for t in accuracy.texts][:1] == [figures.PIXEL_KEY]
  assert figures.PIXEL_KEY.startswith("R, G, B = min, mean, max over seeds")
  case_key, _ = [t.get_text() for t in cases.texts]
  assert case_key.startswith("R, G, B = argmin, first, argmax accuracy, each the mean over seeds")
  for fig in (accuracy, cases):
    assert {ax.get_xlabel() for ax in fig.axes} == {figures.ONE_COLUMN_LABEL}


def test_the_rows_say_where_they_were_measured_and_the_titles_which_cell(case_sweep):
  """The rows name the length each accuracy was measured at; a title gives the best mean and
  its cell, where the cross is; the case figure's title the weakest case at its best cell."""
  config, summary, drawn, _ = case_sweep
  plan = SweepPlan.of(config)
  n, half = config.task.seq_len, tasks.get("case_distinction").validation_length(
      config.task.seq_len)
  accuracy, cases = drawn["accuracy.png"], drawn["case_accuracy.png"]
  columns = len(config.archs)
  assert len(cases.axes) == columns  # the case sets at N alone (eval.validation_case_sets off)
  assert accuracy.axes[0].get_ylabel().startswith(f"training accuracy at N = {n}")
  assert accuracy.axes[columns].get_ylabel().startswith(f"validation accuracy at N = {half}")
  mean = figures.cell_grid(plan, summary, config.archs[0], "train_acc", "mean")
  row = int(np.nanargmax(mean[:, 0]))
  assert titles(accuracy)[0] == (f"{config.archs[0]} train: {mean[row, 0]:.1%}\n"
                                 f"at lr {plan.axis.learning_rates[row]:.1e}")
  image = figures.group_image(plan, summary, config.archs[0],
                              tasks.get("case_distinction").metric_groups(n)[0])
  weakest = image.min(-1)[:, 0]
  row = int(np.argmax(weakest))
  assert titles(cases)[0].endswith(f"weakest {weakest[row]:.1%}\n"
                                   f"at lr {plan.axis.learning_rates[row]:.1e}")
  (cross,) = [line for line in cases.axes[0].get_lines() if line.get_marker() == "x"]
  assert cross.get_ydata()[0] == row


def test_a_drawn_figure_carries_the_drawing_version_and_where_it_comes_from(tmp_path,
                                                                           monkeypatch):
  """The version, and the provenance in the PNG and along the bottom: the experiment from the
  run's about.json, the scale and seeds from its config, the machine from its versions.json."""
  from normattn_jax.reporting import provenance

  config = case_sweep_config()
  (tmp_path / "about.json").write_text(json.dumps({"experiment": "NAP paper, Fig. 3"}))
  (tmp_path / "versions.json").write_text(json.dumps(
      {"backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3", "device_count": 1}))
  _, drawn = draw(config, BASE + tasks.get("case_distinction").extra_metrics(), tmp_path,
                  monkeypatch)
  assert set(drawn) == {"accuracy.png", "case_accuracy.png", "learning_curves.png"}
  expected = provenance.Provenance(
      "NAP paper, Fig. 3", f"case_distinction task (tokens output), N = {config.task.seq_len}, "
      f"d = {config.model.d_model}, {config.train.num_steps} steps, batch "
      f"{config.train.batch_size}", f"{config.num_seeds} seeds", "NVIDIA H100 80GB HBM3")
  for name, fig in drawn.items():
    assert figures.figure_version(str(tmp_path / name)) == figures.FIGURE_VERSION
    assert provenance.provenance_of(str(tmp_path / name)) == expected
    assert fig.texts[-1].get_text().replace("\n", " ") == expected.line()


def test_a_swept_column_is_labelled_by_its_field(tmp_path, monkeypatch):
  config = case_sweep_config()
  config.sweep.name, config.sweep.grid = "train.l2", (0.0, 0.1)
  _, drawn = draw(config, BASE + tasks.get("case_distinction").extra_metrics(), tmp_path,
                  monkeypatch)
  assert {ax.get_xlabel() for ax in drawn["accuracy.png"].axes} == {"l2"}


def test_a_finished_sweep_is_drawn_from_what_its_workdir_holds(case_sweep, tmp_path,
                                                              monkeypatch):
  """draw_finished_sweep (the sweep, rescoring and retraining scripts' figures) draws what
  draw_sweep draws from the run's config.json, summary.json and metrics.npz."""
  from normattn_jax.train.checkpoint import config_json

  config, summary, _, direct = case_sweep
  workdir = tmp_path / "run"
  os.makedirs(workdir)
  (workdir / "config.json").write_text(json.dumps(config_json(config)))
  (workdir / artifacts.METRICS).write_bytes((direct / artifacts.METRICS).read_bytes())
  artifacts.write_summary(str(workdir), summary)
  keep_drawn(monkeypatch)  # at the resolution draw_sweep's were written
  figures.draw_finished_sweep(str(workdir))
  for name in ("accuracy.png", "case_accuracy.png", "learning_curves.png"):
    assert (workdir / name).read_bytes() == (direct / name).read_bytes(), name
