"""The figures of the analyses and of pre-training and fine-tuning runs (reporting.
analysis_figures, reporting.training_figures) draw the numbers they are given. Drawn from
made-up results, no training."""
import os

import numpy as np
import pytest

from normattn_jax.analysis import majority
from normattn_jax.analysis import mode_collapse as mc
from normattn_jax.reporting import analysis_figures, training_figures


@pytest.fixture
def drawn(monkeypatch):
  """The figures the functions close, kept open to be read."""
  figures = []
  for module in (analysis_figures, training_figures):
    monkeypatch.setattr(module.plt, "close", figures.append)
  return figures


def lines(ax):
  return [(line.get_label(), line.get_xdata(), line.get_ydata()) for line in ax.get_lines()]


def test_the_majority_figure_draws_each_variants_seed_mean(tmp_path, drawn):
  config = majority.base_config()
  config.update(variants=("with_projection", "without_projection"), num_seeds=2)
  rows = [{"step": step, "train_loss": [1.0, 3.0, 2.0, 4.0], "test_loss": [1.0] * 4,
           "test_accuracy": [0.2 * step, 0.1, 0.5, 0.7], "query_angle": [10.0] * 4}
          for step in (0, 1)]
  path = str(tmp_path / "majority.png")
  analysis_figures.majority(majority.curves(rows, config), 2, path)
  assert os.path.exists(path)
  loss, accuracy, _ = drawn[0].axes
  (label, x, y), second = lines(loss)
  assert label == "with projection" and list(x) == [0, 1] and list(y) == [2.0, 2.0]
  assert second[0] == "without projection" and list(second[2]) == [3.0, 3.0]
  assert list(lines(accuracy)[0][2]) == pytest.approx([0.05, 0.15])


def test_the_center_distance_figure_draws_the_equations_and_the_simulation(tmp_path, drawn):
  # test_analysis_mode_collapse's 35 points: the update runs op by op, each op compiling anew
  # at each number of points, once per process
  check = mc.center_distance_check(scales=(0.5, 1.0), sizes=((7, 28),),
                                   ratios=np.array([0.5, 2.0]))
  analysis_figures.center_distances(check, str(tmp_path / "distance.png"))
  drawn_lines = lines(drawn[0].axes[0])
  assert [label for label, _, _ in drawn_lines][:2] == ["UNAS, a=0.5", "DNAS, a=0.5"]
  assert len(drawn_lines) == 2 * (2 + 2)  # per a: two equations, two simulated points
  np.testing.assert_array_equal(drawn_lines[1][2], check["scales"][0.5]["dnas"])
  assert drawn_lines[2][2] == [check["scales"][0.5]["simulated"][0]["simulated"]]


def test_the_cluster_figure_titles_each_step_with_its_count(tmp_path, drawn):
  points, labels = mc.two_gaussians(n0=30, n1=6)
  clouds = mc.trajectories(points)
  counts = {scheme: list(range(5)) for scheme in clouds}
  analysis_figures.clusters(clouds, counts, labels, "30 vs 6 points",
                            str(tmp_path / "clusters.png"))
  titles = [ax.get_title() for ax in drawn[0].axes]
  assert titles[0] == "UNAS step 0: 0 cluster(s)" and titles[9] == "DNAS step 4: 4 cluster(s)"


def test_the_unselectable_figure_shows_both_grids(tmp_path, drawn):
  result = {"dims": [3, 4], "ns": [5, 6, 7], "without_layer_norm": [[0.1, 0.2, 0.3],
                                                                    [0.0, 0.5, 1.0]],
            "with_layer_norm": [[0.0] * 3, [0.0] * 3]}
  analysis_figures.unselectable(result, str(tmp_path / "unselectable.png"))
  without, with_ln = (ax.images[0].get_array() for ax in drawn[0].axes[:2])
  np.testing.assert_array_equal(without, result["without_layer_norm"])
  assert not np.any(with_ln)


def test_the_pooling_figure_draws_each_poolings_scale(tmp_path, drawn):
  scales = {n: {m: {"std": n * (i + 1.0), "norm": 1.0} for i, m in
                enumerate(analysis_figures.POOLINGS)} for n in (1, 4, 16)}
  analysis_figures.pooling_scale(scales, str(tmp_path / "pooling.png"))
  label, x, y = lines(drawn[0].axes[0])[1]
  assert label == analysis_figures.POOLINGS[1] and list(x) == [1, 4, 16]
  assert list(y) == [2.0, 8.0, 32.0]


def test_the_explaining_away_figure_bins_the_log_sums_of_both_schemes(tmp_path, drawn):
  sums = {"UNAS": np.array([1e-12, 0.5, 2.0, 4.0]), "DNAS": np.array([0.5, 1.0, 1.0, 1.5])}
  analysis_figures.explaining_away(sums, 4, str(tmp_path / "explaining_away.png"))
  ax = drawn[0].axes[0]
  unas_counts = [patch.get_height() for patch in ax.patches[:79]]
  assert sum(unas_counts) == 4 and "log(1/S)" in ax.get_legend_handles_labels()[1]


def test_the_causal_lm_loss_figure_draws_the_seed_mean_per_logged_chunk(tmp_path, drawn):
  summary = {"log_every": 50, "variants": {
      "with_scaling": {"label": "w/ scaling", "train_loss_curve": [[4.0, 2.0], [2.0, 1.0]]},
      "without_scaling": {"label": "w/o scaling", "train_loss_curve": [[5.0, 5.0], [3.0, 3.0]]}}}
  analysis_figures.causal_lm_loss(summary, str(tmp_path / "loss.png"))
  (label, x, y), _ = lines(drawn[0].axes[0])
  assert label == "w/ scaling" and list(x) == [50, 100] and list(y) == [3.0, 1.5]


def test_the_finetuning_figure_draws_each_learning_rates_seeds(tmp_path, drawn):
  curves = np.array([[[0.5, 0.7], [np.nan, np.nan]], [[0.6, 1.0], [np.nan, np.nan]]])
  metrics = str(tmp_path / "metrics.npz")  # [evaluations, learning rates, seeds]
  np.savez(metrics, accuracy=curves, learning_rates=np.array([1e-4, 3e-4]))
  summary = {"metric": "accuracy", "eval_steps": [10, 20], "task": "genre"}
  training_figures.finetuning_curves(summary, metrics, str(tmp_path / "curves.png"))
  ax = drawn[0].axes[0]
  (label, x, y), = lines(ax)  # the diverged learning rate is left out
  assert label == "lr 0.0001" and list(x) == [10, 20] and list(y) == pytest.approx([0.6, 0.8])
  assert ax.get_ylabel() == "dev accuracy" and ax.get_title() == "genre"


def test_the_pretraining_figures_draw_each_runs_accuracies_and_us_layers(tmp_path, drawn):
  rows = {"softmax": [{"step": 10, "mlm_accuracy": 0.1, "sop_accuracy": 0.5},
                      {"step": 20, "mlm_accuracy": 0.2, "sop_accuracy": 0.6}]}
  training_figures.pretraining_curves(rows, str(tmp_path / "curves.png"))
  (label, x, y), = lines(drawn[0].axes[0])
  assert label == "softmax" and list(x) == [10, 20] and list(y) == pytest.approx([10.0, 20.0])
  u = np.array([[0.2, 0.4], [0.9, 0.7]])
  training_figures.hybrid_weights(u, str(tmp_path / "u.png"))
  mean = [line for line in drawn[1].axes[0].get_lines() if line.get_label() == "mean over heads"]
  assert list(mean[0].get_ydata()) == pytest.approx([0.3, 0.8])
