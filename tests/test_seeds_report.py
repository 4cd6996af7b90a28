"""sweep.seeds: the authors' stored sweeps read cell by cell, our seeds beside theirs, and the
rank test between archs. From made-up curves in both formats, no training."""
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

from normattn_jax.reporting import figures
from normattn_jax.sweep import seeds
from normattn_jax.sweep import artifacts
from normattn_jax.train.checkpoint import config_json, write_json
from normattn_jax.sweep.layout import ModelsAxis
from normattn_jax.sweep.plan import SweepPlan
from helpers.sweeps import case_sweep_config

from helpers import REPO, subprocess_env


EPOCHS, RATES, VALUES, SEEDS = 3, 4, 2, 5


def authors_curve(epoch, lr, value, metric, seed):
  """A made-up accuracy that names its cell: each index in its own decimal place."""
  return 0.1 * metric + 0.01 * lr + 0.001 * value + 0.0001 * seed + 0.00001 * epoch


def write_authors(directory, name, seeds_per_cell=lambda lr, value: SEEDS):
  """A sweep in the authors' format over d = 2^3, 2^4 and learning rates 0.3^1..0.3^4."""
  variations = [{"name": "model_dimension", "min": 3, "range": VALUES, "base": 2},
                {"name": "learning_rate", "min": 1, "range": RATES, "base": 0.3}]
  results = [[[[[authors_curve(e, lr, v, m, s) for s in range(seeds_per_cell(lr, v))]
                for m in range(4)] for v in range(VALUES)] for lr in range(RATES)]
             for e in range(EPOCHS)]
  with open(os.path.join(directory, name + "_params.pickle"), "wb") as f:
    pickle.dump([variations, {"model": name}], f)
  with open(os.path.join(directory, name + ".pickle"), "wb") as f:
    pickle.dump((results, EPOCHS * RATES * VALUES, 0), f)


def test_the_authors_cells_are_read_by_learning_rate_and_swept_value(tmp_path):
  write_authors(tmp_path, "NAP")
  sweep = seeds.AuthorsSweep.read(str(tmp_path), "nap")
  assert sweep.swept == "model_dimension"
  np.testing.assert_allclose(sweep.values, [8, 16])
  np.testing.assert_allclose(sweep.learning_rates, [0.3, 0.09, 0.027, 0.0081])
  cell = sweep.seeds("val_acc", 0.0081, 16)  # rounded as our configs write it: to 1%
  expected = [[authors_curve(e, 3, 1, 1, s) for s in range(SEEDS)] for e in range(EPOCHS)]
  np.testing.assert_allclose(cell, expected)
  with pytest.raises(KeyError, match="learning_rate=0.001 is not one of"):
    sweep.seeds("train_acc", 0.001, 16)
  with pytest.raises(KeyError, match="model_dimension=32"):
    sweep.seeds("train_acc", 0.3, 32)


def test_an_unfinished_authors_sweep_is_refused(tmp_path):
  write_authors(tmp_path, "BERT", seeds_per_cell=lambda lr, v: SEEDS - (lr == 0 and v == 0))
  with pytest.raises(ValueError, match="different numbers of seeds"):
    seeds.AuthorsSweep.read(str(tmp_path), "bert")


def test_rank_test_is_smallest_when_every_seed_lies_above():
  low, high = np.array([0.2, 0.21, 0.22, 0.23, 0.24]), np.array([0.7, 0.8, 0.85, 0.9, 0.95])
  assert seeds.rank_test(high, low) == pytest.approx(1 / 252)
  assert seeds.rank_test(low, high) == pytest.approx(1.0)
  assert 0.2 < seeds.rank_test(low, low + 0.001 * np.array([1, -1, 1, -1, 1])) < 0.8


def test_learned_counts_seeds_at_the_threshold():
  assert seeds.learned(np.array([0.79, 0.8, 0.95, 0.2]), 0.8) == 2


def our_run(tmp_path, d_model=16):
  """A made-up finished sweep of ours at d = 16, its learning rates 0.3^2 and 0.3^4."""
  c = case_sweep_config()
  c.archs = ("nap", "bert")
  c.model.d_model = d_model
  c.learning_rates = (0.09, 0.0081)
  c.num_seeds = SEEDS
  axis = ModelsAxis.of(c)
  evals = c.train.num_steps // c.train.eval_every
  results = {}
  for arch in c.archs:  # nap's seeds at 0.9.., bert's at 0.2..
    base = 0.9 if arch == "nap" else 0.2
    curves = {name: np.tile(base + 0.01 * np.arange(axis.num_models), (evals, 1))
              .astype(np.float32) for name in ("train_acc", "val_acc", "train_loss")}
    curves["train_acc"][-1, axis.rows(1, 0)] -= 0.5  # a later evaluation below the best
    curves["diverged"] = np.zeros((evals, axis.num_models), bool)
    results[(arch, ())] = curves
  artifacts.save_metrics(os.path.join(tmp_path, artifacts.METRICS), SweepPlan.of(c), results)
  write_json(os.path.join(tmp_path, "config.json"), config_json(c))
  return c


def test_ours_beside_the_authors_cell_by_cell(tmp_path):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  write_authors(authors, "NAP")  # no BERT stored: ours alone
  c = our_run(run)
  report = seeds.compare_with_authors([seeds.OurSweep.read(str(run))], str(authors), threshold=0.8,
                         tests=(("nap", "bert"),))
  cells = {(cell["arch"], cell["learning_rate"]): cell for cell in report["cells"]}
  assert set(cells) == {(a, lr) for a in c.archs for lr in c.learning_rates}
  nap = cells[("nap", 0.0081)]
  # ours: seed s of the second learning rate is model 5 + s, best over training (not the last)
  np.testing.assert_allclose(nap["ours"]["train_acc"]["seeds"], 0.9 + 0.01 * (5 + np.arange(5)),
                             rtol=1e-6)
  assert nap["ours"]["train_acc"]["learned"] == 5
  assert cells[("bert", 0.0081)]["ours"]["train_acc"]["learned"] == 0
  # the authors' cell at d = 16 (value index 1) and 0.3^4 (index 3)
  np.testing.assert_allclose(nap["authors"]["train_acc"]["seeds"],
                             [authors_curve(EPOCHS - 1, 3, 1, 0, s) for s in range(SEEDS)])
  assert nap["authors"]["train_acc"]["pixel"]["mean"] == pytest.approx(
      np.mean([authors_curve(EPOCHS - 1, 3, 1, 0, s) for s in range(SEEDS)]))
  # ours (0.95..0.99) against theirs (0.03..0.04): every seed apart, 2 x 1/252 two-sided
  assert nap["ours_vs_authors"]["train_acc"] == pytest.approx(2 / 252)
  assert "authors" not in cells[("bert", 0.0081)]
  (test,) = report["tests"]
  assert (test["better"], test["worse"]) == ("nap", "bert")
  assert test["learning_rates"] == [0.0081, 0.0081]  # each arch's best mean training accuracy
  assert test["ours"]["train_acc"] == pytest.approx(1 / 252)
  assert "authors" not in test
  table = seeds.markdown(report)
  assert "| nap > bert | - | 0.0081 / 0.0081 | 0.004 |" in table
  assert "| nap | - | 0.0081 | authors |" in table
  assert "| validation pixel | p |" in table


def test_without_the_authors_the_table_has_no_column_of_theirs(tmp_path):
  our_run(tmp_path)
  report = seeds.compare_with_authors([seeds.OurSweep.read(str(tmp_path))],
                                      tests=(("nap", "bert"),))
  table = seeds.markdown(report)
  assert "authors" not in table and "| p |" not in table
  assert table.splitlines()[-1] == "| nap > bert | - | 0.0081 / 0.0081 | 0.004 | 0.004 |"


def test_the_authors_test_takes_their_own_best_learning_rate(tmp_path):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  write_authors(authors, "NAP")
  write_authors(authors, "BERT")
  our_run(run)
  (test,) = seeds.compare_with_authors([seeds.OurSweep.read(str(run))], str(authors),
                          tests=(("nap", "bert"),))["tests"]
  # made-up curves rise with the learning-rate index: the smallest rate, 0.3^4, is the best
  assert test["authors_learning_rates"] == [pytest.approx(0.0081)] * 2
  assert 0.3 < test["authors"]["train_acc"] < 0.7  # the same seeds: no difference


def test_a_missing_arch_or_metric_is_named(tmp_path):
  our_run(tmp_path)
  run = seeds.OurSweep.read(str(tmp_path))
  with pytest.raises(KeyError, match="no grid 'mte'"):
    run.seeds("mte", "train_acc", 0.09)
  with pytest.raises(KeyError, match="metric='case_acc_first'"):
    run.seeds("nap", "case_acc_first", 0.09)


def test_a_vmapped_sweep_is_refused_by_name(tmp_path):
  c = our_run(tmp_path)
  c.sweep.name, c.sweep.grid = "train.l2", (0.0, 0.01)
  write_json(os.path.join(tmp_path, "config.json"), config_json(c))
  with pytest.raises(ValueError, match="sweep.name='train.l2' is a vmapped sweep"):
    seeds.OurSweep.read(str(tmp_path))


def test_the_pixel_grids_put_both_sweeps_on_one_grid(tmp_path):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  write_authors(authors, "NAP")  # d = 8, 16; no BERT stored
  our_run(run, d_model=32)  # a d the authors did not run
  sweep = seeds.OurSweep.read(str(run))
  grids = seeds.pixel_grids([sweep], str(authors))
  assert grids.field == "model.d_model" and grids.archs == ["bert", "nap"]  # the paper's order
  np.testing.assert_allclose(grids.values, [8, 16, 32])
  np.testing.assert_allclose(grids.learning_rates, [0.3, 0.09, 0.027, 0.0081])
  ours = grids.images[("nap", "ours", "train_acc")]
  expected = seeds.pixel(sweep.seeds("nap", "train_acc", 0.0081))
  np.testing.assert_allclose(ours[3, 2], [expected[k] for k in ("min", "mean", "max")])
  ran = np.zeros(ours.shape[:2], bool)
  ran[[1, 3], 2] = True  # our learning rates 0.3^2 and 0.3^4 at d = 32, nothing else
  np.testing.assert_array_equal(np.isfinite(ours).all(-1), ran)
  theirs = grids.images[("nap", "authors", "val_acc")]
  np.testing.assert_array_equal(np.isfinite(theirs).all(-1),
                                np.broadcast_to(np.arange(3) < 2, ran.shape))  # d = 8, 16
  cell = [authors_curve(EPOCHS - 1, 3, 1, 1, s) for s in range(SEEDS)]  # 0.3^4, d = 16
  np.testing.assert_allclose(theirs[3, 1], [min(cell), np.mean(cell), max(cell)])
  assert np.isnan(grids.images[("bert", "authors", "train_acc")]).all()


def test_the_authors_plots_are_drawn_beside_ours(tmp_path, monkeypatch):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  write_authors(authors, "NAP")
  our_run(run)
  grids = seeds.pixel_grids([seeds.OurSweep.read(str(run))], str(authors))
  drawn = []
  monkeypatch.setattr(figures.plt, "close", drawn.append)
  path = tmp_path / "beside.png"
  figures.pixels_beside_authors(grids, str(path))
  assert path.stat().st_size > 0
  (fig,) = drawn
  assert [t.get_text() for t in fig.texts][:1] == [figures.PIXEL_KEY + "\n" + figures.HATCH_KEY]
  titles = [ax.get_title().split("\n") for ax in fig.axes]
  image = grids.images[("nap", "authors", "train_acc")]
  best = np.nanmax(image[..., 1])
  # bert's best mean: its models 5..9 at 0.2 + 0.01 * model
  assert [t[1] for t in titles[:4]] == ["not in the mirror used here", titles[1][1]] * 2
  assert titles[1][1].startswith("27.0% at lr ")
  assert titles[0][0] == "bert train (the training length), theirs:"
  assert titles[4][1].startswith(f"{best:.1%} at lr ")
  alpha = fig.axes[5].get_images()[0].get_array()[..., 3]  # nap train, ours: d = 16 only
  np.testing.assert_array_equal(alpha, np.isfinite(grids.images[("nap", "ours", "train_acc")])
                                .all(-1))


def test_a_diverged_seed_counts_as_failed_at_every_evaluation():
  """Seed 0 scored 0.34 before it diverged: its best over training is 0, not 0.34."""
  c = case_sweep_config()
  c.archs, c.learning_rates, c.num_seeds = ("nap",), (0.01,), 2
  curves = {"train_acc": np.array([[0.34, 0.5], [0.0, 0.6]], np.float32),
            "diverged": np.array([[False, False], [True, False]])}
  run = seeds.OurSweep(SweepPlan.of(c), {("nap", ()): curves})
  np.testing.assert_allclose(seeds.best_per_seed(run.seeds("nap", "train_acc", 0.01)), [0, 0.6])


def _compare(run, authors):
  return seeds.compare_with_authors([seeds.OurSweep.read(str(run))], str(authors))


def test_the_previous_names_still_import_for_one_release():
  with pytest.warns(DeprecationWarning, match="compare_with_authors"):
    assert seeds.compare is seeds.compare_with_authors
  with pytest.warns(DeprecationWarning, match="normattn_jax.sweep.seeds"):
    from normattn_jax.reporting import seeds as old  # the module's path before it moved
  with pytest.warns(DeprecationWarning, match="compare_with_authors"):
    assert old.compare is seeds.compare_with_authors


def test_a_missing_authors_folder_is_refused_by_name(tmp_path):
  our_run(tmp_path)
  with pytest.raises(FileNotFoundError, match=f"--authors folder {tmp_path / 'nowhere'} "
                                              "does not exist"):
    _compare(tmp_path, tmp_path / "nowhere")


def test_an_authors_folder_of_none_of_the_archs_is_refused_naming_the_files(tmp_path):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  our_run(run)
  with pytest.raises(FileNotFoundError,
                     match=r"holds none of BERT.pickle, NAP.pickle \(and their _params"):
    _compare(run, authors)  # empty
  write_authors(authors, "MTE")
  with pytest.raises(FileNotFoundError, match="holds none of"):
    _compare(run, authors)  # another arch's only
  with pytest.raises(FileNotFoundError, match="holds none of"):
    seeds.pixel_grids([seeds.OurSweep.read(str(run))], str(authors))


@pytest.mark.parametrize("damage, named", [
    (lambda d: os.remove(d / "NAP_params.pickle"), "NAP_params.pickle is missing"),
    (lambda d: os.remove(d / "NAP.pickle"), "NAP.pickle is missing"),
    (lambda d: open(d / "NAP.pickle", "wb").close(), "NAP.pickle: empty, truncated or damaged"),
    (lambda d: (d / "NAP.pickle").write_bytes(b"\x80\x04garbage"),
     "NAP.pickle: empty, truncated or damaged"),
    (lambda d: (d / "NAP.pickle").write_bytes(b"cmodule_not_here\nSweep\n."),  # a class
     "NAP.pickle: empty, truncated or damaged (ModuleNotFoundError"),
    (lambda d: (d / "NAP.pickle").write_bytes(pickle.dumps(3)),
     "NAP.pickle: holds int 3, not the authors' tuple (results, completed runs, run order)"),
    (lambda d: (d / "NAP.pickle").write_bytes(pickle.dumps((["epochs"], 1, 0))),
     "NAP.pickle: its results are no array of numbers"),
    (lambda d: (d / "NAP_params.pickle").write_bytes(pickle.dumps({"model": "NAP"})),
     "NAP_params.pickle: holds dict {'model': 'NAP'}, not the authors' pair"),
    (lambda d: (d / "NAP_params.pickle").write_bytes(pickle.dumps(([{"name": "x"}] * 2, {}))),
     "NAP_params.pickle: the variation {'name': 'x'} lacks one of ('name', 'min', 'range', "
     "'base')"),
])
def test_an_incomplete_authors_sweep_is_refused_naming_its_file(tmp_path, damage, named):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  write_authors(authors, "NAP")
  write_authors(authors, "BERT")
  damage(authors)
  our_run(run)
  with pytest.raises((FileNotFoundError, ValueError), match=re.escape(named)):
    _compare(run, authors)


def test_the_command_names_a_damaged_file_of_our_run(tmp_path):
  our_run(tmp_path)
  (tmp_path / "config.json").write_text('{"archs": ')
  done = subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.compare_seeds", str(tmp_path)],
      capture_output=True, text=True, cwd=REPO, timeout=300,
      env=subprocess_env())
  assert done.returncode != 0
  assert f"{tmp_path / 'config.json'} is not valid JSON" in done.stderr
  assert "Traceback" not in done.stderr


# the message: test_a_missing_authors_folder_is_refused_by_name; the command's refusal of what
# the comparison raises: test_the_command_names_a_damaged_file_of_our_run
@pytest.mark.slow
def test_the_command_refuses_a_missing_authors_folder(tmp_path):
  our_run(tmp_path)
  done = subprocess.run(
      [sys.executable, "-m", "normattn_jax.cli.compare_seeds",
       f"--authors={tmp_path / 'nowhere'}", str(tmp_path)], capture_output=True, text=True,
      cwd=REPO, timeout=300, env=subprocess_env())
  assert done.returncode != 0
  assert f"--authors folder {tmp_path / 'nowhere'} does not exist" in done.stderr


# ----- the case task: a seed has learned when it learned all three cases -----

def case_run(tmp_path, argmax_of_bert=0.03):
  """A made-up finished case-task sweep (N = 8, 1000 examples per case) whose seeds all reach
  at least 0.9 training accuracy; nap's seeds solve the argmax case (0.3 + 0.01 s), bert's stay
  at ``argmax_of_bert`` on it (seed 4 of the second learning rate once at 0.5)."""
  c = case_sweep_config(**{"eval.case_set_size": 1000})
  c.archs = ("nap", "bert")
  c.model.d_model = 16
  c.learning_rates = (0.09, 0.0081)
  c.num_seeds = SEEDS
  axis = ModelsAxis.of(c)
  evals = c.train.num_steps // c.train.eval_every
  results = {}
  for arch in c.archs:
    ramp = 0.01 * np.arange(axis.num_models)
    flat = lambda value: np.tile(value + ramp, (evals, 1)).astype(np.float32)
    curves = {"train_acc": flat(0.9), "val_acc": flat(0.8), "train_loss": flat(0.1),
              "case_acc_argmin": flat(0.85), "case_acc_first": np.ones((evals, axis.num_models),
                                                                      np.float32),
              "case_acc_argmax": (flat(0.3) if arch == "nap"
                                  else np.full((evals, axis.num_models), argmax_of_bert,
                                               np.float32)),
              "diverged": np.zeros((evals, axis.num_models), bool)}
    if arch == "bert":  # one evaluation of one seed above the threshold: its best counts
      curves["case_acc_argmax"][1, axis.rows(1, 0)[4]] = 0.5
    results[(arch, ())] = curves
  artifacts.save_metrics(os.path.join(tmp_path, artifacts.METRICS), SweepPlan.of(c), results)
  write_json(os.path.join(tmp_path, "config.json"), config_json(c))
  return c


@pytest.fixture
def guess_rate(monkeypatch):
  """The best input-independent guess fixed at 2% (threshold 2% + 5 SE = 4.21%), the rules'
  cache emptied."""
  monkeypatch.setattr(seeds.synthetic, "case_guess_rate", lambda seq_len, vocab_size: 0.02)
  monkeypatch.setattr(seeds, "_CASE_RULES", {})
  return 0.02


def test_learned_threshold_is_chance_plus_a_margin():
  assert seeds.learned_threshold(8, 50) == pytest.approx(0.125 + 5 * (0.125 * 0.875 / 50) ** 0.5)
  assert seeds.learned_threshold(128, 100000) == pytest.approx(2 / 128)
  assert seeds.learned_threshold(8, 1000, chance=0.02) == pytest.approx(  # 5 SE > chance
      0.02 + 5 * (0.02 * 0.98 / 1000) ** 0.5)
  assert seeds.learned_threshold(128, 1000, chance=0.0143) == pytest.approx(
      0.0143 + 5 * (0.0143 * 0.9857 / 1000) ** 0.5)


def test_the_best_constant_guess_beats_one_over_n_as_ties_go_to_the_first():
  from normattn_jax.tasks import synthetic
  n, k = 8, 98  # the argmax case draws from 98 values (50 and 64 left out)
  levels = np.arange(k) / k
  exact = max(np.sum(levels ** p * (levels + 1 / k) ** (n - 1 - p)) / k for p in range(n))
  rate = synthetic.case_guess_rate(n, 100, num_per_case=20000)
  assert rate > 1 / n
  assert rate >= exact - 4 * (exact * (1 - exact) / 20000) ** 0.5


def test_a_seed_has_learned_the_case_task_only_with_all_three_cases(tmp_path, guess_rate):
  c = case_run(tmp_path)
  report = seeds.compare_with_authors([seeds.OurSweep.read(str(tmp_path))], threshold=0.8)
  (rule,) = report["case_rules"]
  assert rule == {"seq_len": 8, "vocab_size": c.task.vocab_size, "case_set_size": 1000,
                  "chance": 0.02, "threshold": pytest.approx(0.0421, abs=1e-4)}
  cells = {(cell["arch"], cell["learning_rate"]): cell for cell in report["cells"]}
  nap, bert = cells[("nap", 0.0081)]["ours"], cells[("bert", 0.0081)]["ours"]
  # every seed above 80% training accuracy; bert's argmax at 3%, below the 4.21% threshold
  assert min(bert["train_acc"]["seeds"]) >= 0.9
  np.testing.assert_allclose(nap["cases"]["argmax"], 0.3 + 0.01 * (5 + np.arange(5)), rtol=1e-6)
  np.testing.assert_allclose(bert["cases"]["argmax"], [0.03] * 4 + [0.5], rtol=1e-6)
  assert nap["learned_all"] == [True] * 5 and nap["train_acc"]["learned"] == 5
  assert bert["learned_all"] == [False] * 4 + [True]  # its best over training: 0.5
  assert bert["train_acc"]["learned"] == 1
  assert cells[("bert", 0.09)]["ours"]["train_acc"]["learned"] == 0
  table = seeds.markdown(report)
  assert "exceeds 4.21%" in table and "(2.00%; 1/N = 12.50%)" in table
  assert ">= 80%" not in table  # the training-accuracy rule is not this report's
  assert "| train, per seed | argmin / first / argmax, per seed | above the floor |" in table
  row = next(line for line in table.splitlines() if line.startswith("| bert | - | 0.0081 |"))
  cases = "90.0/100.0/3.0, 91.0/100.0/3.0, 92.0/100.0/3.0, 93.0/100.0/3.0, 94.0/100.0/50.0"
  assert f"| {cases} | 1/5 |" in row


def test_a_case_just_below_the_threshold_is_not_learned(tmp_path, guess_rate):
  case_run(tmp_path, argmax_of_bert=0.042)  # twice chance, not chance + 5 SE
  report = seeds.compare_with_authors([seeds.OurSweep.read(str(tmp_path))])
  bert = next(cell["ours"] for cell in report["cells"]
              if cell["arch"] == "bert" and cell["learning_rate"] == 0.09)
  assert bert["learned_all"] == [False] * 5


def test_the_authors_seeds_are_not_judged_without_their_cases(tmp_path, guess_rate):
  authors, run = tmp_path / "authors", tmp_path / "run"
  authors.mkdir(), run.mkdir()
  write_authors(authors, "NAP")
  case_run(run)
  report = seeds.compare_with_authors([seeds.OurSweep.read(str(run))], str(authors))
  nap = next(cell for cell in report["cells"]
             if cell["arch"] == "nap" and cell["learning_rate"] == 0.0081)
  assert nap["authors"]["train_acc"]["learned"] is None and "cases" not in nap["authors"]
  table = seeds.markdown(report)
  row = next(line for line in table.splitlines() if line.startswith("| nap | - | 0.0081 | authors"))
  assert row.split(" | ")[5:7] == ["-", "-"]  # no cases, no learned count
  assert "their seeds cannot be placed against it" in table


def test_a_case_task_run_without_case_metrics_keeps_the_training_rule(tmp_path):
  our_run(tmp_path)  # case_sweep_config's case task, stored without case_acc_*
  report = seeds.compare_with_authors([seeds.OurSweep.read(str(tmp_path))], threshold=0.8)
  assert report["case_rules"] == [] and all("case_rule" not in c for c in report["cells"])
  assert seeds.markdown(report).startswith(
      "Best accuracy over training per seed (%); train >= 80%: seeds whose best training "
      "accuracy reaches it")


def test_the_best_case_pixel_is_the_cell_whose_weakest_case_is_highest():
  """The document's "learned" reads the case figure's cross: the cell of an arch whose weakest
  case mean is highest, at its static point only."""
  def cell(arch, lr, d, argmin, first, argmax):
    metrics = {f"case_acc_{case}": {"mean": value}
               for case, value in zip(seeds.CASES, (argmin, first, argmax))}
    return {"arch": arch, "learning_rate": lr, "params": {"model.d_model": d},
            "metrics": metrics}
  summary = {"cells": [cell("nap", 0.1, 64, 0.9, 1.0, 0.2),    # the best mean, not the weakest
                       cell("nap", 0.01, 64, 0.6, 1.0, 0.55),
                       cell("nap", 0.01, 128, 0.9, 1.0, 0.9),   # another point
                       cell("max", 0.01, 64, 1.0, 1.0, 1.0)]}
  lr, means = seeds.best_case_pixel(summary, "nap", {"model.d_model": 64})
  assert (lr, means) == (0.01, [0.6, 1.0, 0.55])
  assert min(means) >= seeds.CASES_LEARNED
  with pytest.raises(KeyError, match="sum"):
    seeds.best_case_pixel(summary, "sum", {"model.d_model": 64})
