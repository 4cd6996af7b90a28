"""Per-seed results of a sweep beside the NAP authors' stored ones.

A pixel of the paper's plots is a min, mean and max over 5 seeds, and seeds of these tasks are
often bimodal (a seed learns the task or stays at a base rate), so a claim between architectures
is judged here seed by seed: each seed's best accuracy over training, how many seeds learn, and a
rank test between two architectures' seeds.

On the case task a seed has learned when it learned each of the three cases (the NAP paper's
Fig. 4 and 5 criterion, "learn all three cases"): its best accuracy on every case above
``learned_threshold``, the report card's rule, with chance the best input-independent guess
(``synthetic.case_guess_rate``). Training accuracy alone does not tell: at N = 128 the argmax
case is 7.5% of the data, so a model that never solves it can still reach 92.5%. On other tasks
a seed has learned when its best training accuracy reaches a given threshold. The rank test
needs scipy (the ``analysis`` extra); the rest, the ``experiments`` extra.

The authors' code (OliverRichter/normalized-attention, ``train.py``) stores each architecture's
sweep as ``<ARCH>.pickle``, a tuple ``(results, completed runs, run order)`` whose ``results``
nest as [epoch][learning rate][swept value][metric][seed] (metric 0: training accuracy, 1:
validation accuracy), beside ``<ARCH>_params.pickle``, a pair ``(variations, params)`` whose
two variations ``{name, min, range, base}`` give the swept values ``base ** (index + min)``
(the first the swept hyper-parameter, the second the learning rate).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
from typing import Mapping, Optional

import numpy as np

from normattn_jax import _moved
from normattn_jax._extras import require
from normattn_jax.tasks import synthetic
from normattn_jax.sweep import artifacts
from normattn_jax.sweep.config import get_field, point_label
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.scoring import LOWER_IS_BETTER, best_over_training, failed_where_diverged

# Our architecture names -> the authors' file names.
AUTHORS_NAMES = {"bert": "BERT", "mte": "MTE", "nap": "NAP", "non": "NON", "sum": "sum",
                 "max": "max"}
# The authors' names of swept hyper-parameters -> our config fields.
AUTHORS_FIELDS = {"model_dimension": "model.d_model", "vocabulary_size": "task.vocab_size",
                  "heads": "model.num_heads", "layers": "model.num_layers",
                  "max_sequence_length": "task.seq_len", "batch_size": "train.batch_size"}
# Our metric names -> the authors' metric index.
AUTHORS_METRICS = {"train_acc": 0, "val_acc": 1}
CASES = synthetic.CASES
CASE_METRICS = tuple(f"case_acc_{case}" for case in CASES)  # at the training length N
# A seed learns a case when its best accuracy on that case beats chance by at least chance
# itself and by LEARNED_SE binomial standard errors of chance on the case set.
LEARNED_SE = 5.0


def learned_threshold(seq_len: int, case_set_size: int, chance: Optional[float] = None) -> float:
  """The accuracy a seed must beat on a case to have learned it: chance plus the larger of
  chance and ``LEARNED_SE`` binomial standard errors of chance on ``case_set_size`` examples.

  Args:
    seq_len: N (the label is one of N positions).
    case_set_size: examples per case.
    chance: the accuracy of the best guess that ignores the input; None for 1/N (labels uniform
      over the positions). The case task's argmin and argmax labels are not uniform
      (``synthetic.case_guess_rate``).

  Returns:
    The threshold, in (0, 1) for chance below 1/2.
  """
  chance = 1.0 / seq_len if chance is None else float(chance)
  error = np.sqrt(chance * (1 - chance) / case_set_size)
  return float(chance + max(chance, LEARNED_SE * error))


_CASE_RULES = {}


def case_rule(config) -> Optional[dict]:
  """The case task's rule for a seed to have learned, for a run of ``config``: ``{"seq_len",
  "vocab_size", "case_set_size", "chance", "threshold"}`` (``learned_threshold`` with chance
  ``synthetic.case_guess_rate``); None for other tasks."""
  if config.task.name != "case_distinction":
    return None
  key = (int(config.task.seq_len), int(config.task.vocab_size), int(config.eval.case_set_size))
  if key not in _CASE_RULES:
    chance = synthetic.case_guess_rate(key[0], key[1])
    _CASE_RULES[key] = {"seq_len": key[0], "vocab_size": key[1], "case_set_size": key[2],
                        "chance": chance, "threshold": learned_threshold(key[0], key[2], chance)}
  return dict(_CASE_RULES[key])


# The NAP paper reads "learns all three cases" (Fig. 4 and 5) from a pixel whose R, G and B are
# the argmin, first and argmax accuracy, each the mean over seeds at its best over training: a
# white pixel. A cell has learned the cases when its weakest channel is at least CASES_LEARNED,
# every channel at least half bright (the paper gives no number).
CASES_LEARNED = 0.5


def point_cells(summary: Mapping, arch: str, params: Optional[Mapping] = None) -> list:
  """An arch's cells (one per learning rate) of a sweep's ``summary.json`` at one static point
  (``{"model.d_model": 128}``; None for a sweep without one)."""
  want = {k: float(v) for k, v in (params or {}).items()}
  return [c for c in summary["cells"] if c["arch"] == arch
          and {k: float(v) for k, v in c["params"].items()} == want]


def best_case_pixel(summary: Mapping, arch: str, params: Optional[Mapping] = None):
  """An arch's cell of a sweep's ``summary.json`` whose weakest case is highest (the case
  figure's cross): ``(learning rate, [argmin, first, argmax] mean accuracies)``.

  Args:
    summary: the sweep's ``summary.json`` tree.
    arch: the architecture.
    params: the static point (``{"model.d_model": 128}``); None for a sweep without one.
  """
  cells = point_cells(summary, arch, params)
  if not cells:
    raise KeyError(f"the summary has no cell of {arch!r} at {params or {}}")
  means = lambda c: [c["metrics"][metric]["mean"] or 0.0 for metric in CASE_METRICS]
  best = max(cells, key=lambda c: min(means(c)))
  return best["learning_rate"], means(best)


def learned_cases(cases: Mapping, threshold: float) -> list[bool]:
  """Per seed, whether it learned all three cases: ``cases`` ``{case: [seeds]}`` of best
  accuracies, each above ``threshold``."""
  each = np.array([np.asarray(cases[case], dtype=np.float64) for case in CASES]) > threshold
  return [bool(x) for x in each.all(axis=0)]


def _variation_values(variation: dict) -> np.ndarray:
  """The values of one of the authors' variations: ``base ** (index + min)``, or
  ``index + min`` where ``base`` is false."""
  exponents = np.arange(variation["range"]) + variation["min"]
  return float(variation["base"]) ** exponents if variation["base"] else exponents.astype(float)


def _close(values: np.ndarray, value: float) -> np.ndarray:
  """Where ``values`` equal ``value`` to 1% (stored learning rates are rounded)."""
  return np.isclose(values, value, rtol=1e-2, atol=0.0)


def _index_of(values: np.ndarray, value: float, what: str) -> int:
  """The index of ``value`` in ``values`` (``_close``)."""
  close = np.flatnonzero(_close(values, value))
  if close.size != 1:
    raise KeyError(f"{what}={value:g} is not one of {[float(f'{v:.3g}') for v in values]}")
  return int(close[0])


def _load(path: str):
  """One of the authors' pickles; one that does not unpickle (empty, cut short, damaged, or
  naming classes this environment lacks) is named."""
  with open(path, "rb") as f:
    try:
      return pickle.load(f)
    except Exception as err:  # unpickling bad bytes can raise nearly anything
      raise ValueError(f"{path}: empty, truncated or damaged ({type(err).__name__}: {err}); "
                       "copy it again from paper_results") from None


def _variations(path: str, stored) -> tuple[dict, dict]:
  """The two variations of an ``_params.pickle`` (``(variations, params)``), each checked to
  hold ``{name, min, range, base}``."""
  fields = ("name", "min", "range", "base")
  variations = stored[0] if isinstance(stored, (tuple, list)) and len(stored) == 2 else None
  if not isinstance(variations, (tuple, list)) or len(variations) != 2:
    raise ValueError(f"{path}: holds {type(stored).__name__} {_short(stored)}, not the authors' "
                     "pair (variations, params) with two variations")
  for variation in variations:
    if not isinstance(variation, dict) or not set(fields) <= set(variation):
      raise ValueError(f"{path}: the variation {_short(variation)} lacks one of {fields}")
  return variations[0], variations[1]


def _results(path: str, stored):
  """The ``results`` of an ``<ARCH>.pickle`` (``(results, completed runs, run order)``)."""
  if not isinstance(stored, (tuple, list)) or not stored:
    raise ValueError(f"{path}: holds {type(stored).__name__} {_short(stored)}, not the authors' "
                     "tuple (results, completed runs, run order)")
  return stored[0]


def _short(value) -> str:
  text = repr(value)
  return text if len(text) <= 80 else text[:77] + "..."


def authors_files(arch: str) -> tuple[str, str]:
  """The two files the authors' code stores an architecture's sweep in."""
  name = AUTHORS_NAMES.get(arch, arch)
  return f"{name}.pickle", f"{name}_params.pickle"


def check_authors_folder(directory: str, archs) -> None:
  """Refuse an ``--authors`` folder that would leave the report without the authors' columns
  unnoticed: a missing folder, one with none of ``archs``' sweeps, or an arch with only one of
  its two files. (An arch with neither is one the authors did not store: ours alone.)

  Args:
    directory: the folder of the authors' pickles.
    archs: our architectures to compare.

  Raises:
    FileNotFoundError: naming the folder, the files it lacks or the files it should hold.
  """
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"--authors folder {directory} does not exist")
  held = []
  for arch in archs:
    present = [os.path.exists(os.path.join(directory, f)) for f in authors_files(arch)]
    if any(present) and not all(present):
      missing = authors_files(arch)[present.index(False)]
      raise FileNotFoundError(f"--authors folder {directory}: {missing} is missing (the "
                              f"authors store {arch}'s sweep in "
                              f"{' and '.join(authors_files(arch))})")
    if all(present):
      held.append(arch)
  if not held:
    expected = ", ".join(f for arch in archs for f in authors_files(arch)[:1])
    raise FileNotFoundError(f"--authors folder {directory} holds none of {expected} (and their "
                            "_params.pickle): give a folder of the authors' paper_results "
                            "whose sweeps include the runs' archs")


@dataclasses.dataclass(frozen=True)
class AuthorsSweep:
  """One architecture's stored sweep of the authors' code.

  Attributes:
    curves: ``[epochs, learning rates, swept values, metrics, seeds]``.
    learning_rates: one per index of the learning-rate axis.
    swept: the authors' name of the swept hyper-parameter, e.g. "model_dimension".
    values: one per index of the swept axis.
  """
  curves: np.ndarray
  learning_rates: np.ndarray
  swept: str
  values: np.ndarray

  @classmethod
  def read(cls, directory: str, arch: str) -> AuthorsSweep:
    """Read ``<directory>/<ARCH>.pickle`` and its ``_params.pickle``.

    Args:
      directory: a folder of the authors' ``paper_results``, e.g.
        ``paper_results/cases/first_token_output/var_dim``.
      arch: our name of the architecture (``AUTHORS_NAMES``).

    Returns:
      The sweep.

    Raises:
      FileNotFoundError: the folder lacks the architecture's files.
      ValueError: a file is empty, truncated or damaged, holds another structure than the
        authors' code stores, or the stored sweep is incomplete (cells with different seed
        counts) or not a learning-rate sweep.
    """
    name = os.path.join(directory, AUTHORS_NAMES.get(arch, arch))
    swept, rates = _variations(name + "_params.pickle", _load(name + "_params.pickle"))
    results = _results(name + ".pickle", _load(name + ".pickle"))
    if rates["name"] != "learning_rate":
      raise ValueError(f"{name}_params.pickle: the second variation is {rates['name']!r}, "
                       "not the learning rate")
    try:
      curves = np.asarray(results, dtype=np.float64)
    except (TypeError, ValueError) as err:
      raise ValueError(f"{name}.pickle: its results are no array of numbers [epochs, learning "
                       f"rates, values, metrics, seeds] ({err}); cells that hold different "
                       "numbers of seeds are an unfinished sweep") from None
    if curves.ndim != 5:
      raise ValueError(f"{name}.pickle: results of shape {curves.shape}, expected "
                       "[epochs, learning rates, values, metrics, seeds]")
    return cls(curves, _variation_values(rates), swept["name"], _variation_values(swept))

  def seeds(self, metric: str, learning_rate: float, value: float) -> np.ndarray:
    """One cell's curves, ``[epochs, seeds]``.

    Args:
      metric: "train_acc" or "val_acc".
      learning_rate: one of ``learning_rates`` (to 1%).
      value: one of ``values`` (to 1%).
    """
    if metric not in AUTHORS_METRICS:
      raise KeyError(f"metric={metric!r}: the authors stored {tuple(AUTHORS_METRICS)}")
    return self.curves[:, _index_of(self.learning_rates, learning_rate, "learning_rate"),
                       _index_of(self.values, value, self.swept), AUTHORS_METRICS[metric]]


@dataclasses.dataclass(frozen=True)
class OurSweep:
  """A finished sweep of ours (its ``config.json`` and ``metrics.npz``).

  Attributes:
    plan: the run's plan (of its config).
    results: ``{grid key (arch, static point items): {metric: [evals, models]}}``.
  """
  plan: SweepPlan
  results: Mapping

  @classmethod
  def read(cls, workdir: str) -> OurSweep:
    """Read a finished sweep; one with a vmapped sweep (``train.l2``, ``train.dropout``) is
    refused, as a cell here is a learning rate at a static point."""
    plan = SweepPlan.of(artifacts.read_config(workdir))
    swept = plan.axis.swept_field
    if swept:
      raise ValueError(f"{workdir}: sweep.name={swept!r} is a vmapped sweep; compare its seeds "
                       "with sweeps of learning rates and static points only")
    return cls(plan, artifacts.read_results(workdir, plan))

  @property
  def config(self):
    """The run's config."""
    return self.plan.config

  @property
  def learning_rates(self) -> tuple[float, ...]:
    """The run's learning rates, in its config's order."""
    return self.plan.axis.learning_rates

  @property
  def points(self) -> list[dict]:
    """The run's static sweep points (``[{}]`` without a static sweep)."""
    return [dict(point) for point in self.plan.points]

  def seeds(self, arch: str, metric: str, learning_rate: float,
            point: Optional[dict] = None) -> np.ndarray:
    """One cell's curves, ``[evaluations, seeds]``; a seed that diverged is failed at every
    evaluation (``scoring.failed_where_diverged``).

    Args:
      arch: one of the run's archs.
      metric: a metric of the run, e.g. "train_acc".
      learning_rate: one of the run's learning rates (to 1%).
      point: the static sweep point (``{}`` or None without one).
    """
    label = point_label(point or {})
    history = next((h for (a, p), h in self.results.items()
                    if a == arch and point_label(dict(p)) == label), None)
    if history is None:
      raise KeyError(f"the run has no grid {arch!r}{f' at {label}' if label else ''}")
    if metric not in history:
      raise KeyError(f"metric={metric!r}: the run stored {tuple(sorted(history))}")
    axis = self.plan.axis
    lr_index = _index_of(np.asarray(self.learning_rates), learning_rate, "learning_rate")
    rows = axis.rows(lr_index, 0)
    if metric == "diverged" or "diverged" not in history:
      return history[metric][:, rows]
    return failed_where_diverged(history[metric][:, rows], history["diverged"][-1, rows],
                                 metric in LOWER_IS_BETTER)


def best_per_seed(curves: np.ndarray) -> np.ndarray:
  """Each seed's best accuracy over training, ``[seeds]``, from ``[evaluations, seeds]``."""
  return np.nanmax(curves, axis=0)


def pixel(curves: np.ndarray) -> dict:
  """The paper's pixel values of a cell: min, mean and max over seeds, each at its best over
  training (``scoring.best_over_training``)."""
  return best_over_training(curves, lower_is_better=False)


def learned(best: np.ndarray, threshold: float) -> int:
  """How many seeds reached ``threshold`` (e.g. 0.8 train accuracy: a task without cases
  learned)."""
  return int(np.sum(np.asarray(best) >= threshold))


def rank_test(better: np.ndarray, worse: np.ndarray, alternative: str = "greater") -> float:
  """The Mann-Whitney U test that ``better``'s seeds lie above ``worse``'s (or, with
  ``alternative="two-sided"``, that the two differ).

  Exact for small samples without ties; with ties (seeds stuck at one base rate), the normal
  approximation with tie correction.

  Returns:
    The p-value (the smallest for 5 seeds against 5, one-sided: 1/252 = 0.004).

  Raises:
    ImportError: if scipy is not installed (the ``analysis`` extra).
  """
  stats = require("scipy.stats", "analysis")
  return float(stats.mannwhitneyu(better, worse, alternative=alternative).pvalue)


def compare_with_authors(runs: list[OurSweep], authors_dir: Optional[str] = None,
                         threshold: float = 0.8, tests: tuple[tuple[str, str], ...] = ()
                         ) -> dict:
  """Every cell of ``runs`` seed by seed, beside the authors' same cell where they stored it,
  and rank tests between architectures at their best learning rates.

  An architecture's best learning rate is the paper's: the best mean training accuracy over
  training, ours among the learning rates we ran, the authors' among all of theirs.

  Args:
    runs: finished sweeps (any archs and learning rates, with or without static points).
    authors_dir: a folder of the authors' pickles whose swept hyper-parameter is a field of our
      config (``AUTHORS_FIELDS``); None for ours alone.
    threshold: the best training accuracy at which a seed counts as having learned a task
      without cases; a seed of the case task has learned when it learned all three cases
      (``case_rule``).
    tests: pairs ``(better, worse)`` of archs, each tested at its best learning rate at every
      static point both were run at.

  Returns:
    ``{"threshold", "case_rules", "cells": [...], "tests": [...]}``. A cell holds, for "ours"
    and (where stored) "authors", per metric the seeds' best over training, the pixel values
    and, for training accuracy, the number of seeds that learned; with the authors' cell also
    "ours_vs_authors", per metric the two-sided rank test between the two sets of seeds. On
    the case task a cell also holds its "case_rule" and ours "cases" (per case the seeds' best
    accuracy) and "learned_all" (per seed); the authors stored no per-case accuracies, so
    their "learned" is None there. "case_rules" lists the distinct rules of the cells.

  Raises:
    FileNotFoundError, ValueError: an ``authors_dir`` that is missing, holds none of the runs'
      archs or an incomplete sweep (``check_authors_folder``, ``AuthorsSweep.read``).
  """
  if authors_dir is not None:
    check_authors_folder(authors_dir, _archs(runs))
  cells, authors, ours_best, rules = [], {}, {}, []
  for run in runs:
    rule = case_rule(run.config)
    if rule is not None and not all(m in h for h in run.results.values() for m in CASE_METRICS):
      rule = None  # a run that stored no per-case accuracies: training accuracy alone
    if rule is not None and rule not in rules:
      rules.append(rule)
    for point in run.points:
      for arch in run.plan.archs:
        sweep = _authors_sweep(authors, authors_dir, arch)
        value = _field_value(run.plan, point, _our_field(sweep)) if sweep else None
        for lr in run.learning_rates:
          cell = {"arch": arch, "learning_rate": lr, "point": point_label(point),
                  "ours": _scores(lambda m: run.seeds(arch, m, lr, point), threshold, rule)}
          if rule is not None:
            cell["case_rule"] = rule
          if sweep is not None and _close(sweep.learning_rates, lr).any():
            cell["authors"] = _scores(lambda m: sweep.seeds(m, lr, value), threshold)
            if rule is not None:  # their pickles hold no per-case accuracies
              cell["authors"]["train_acc"]["learned"] = None
            cell["ours_vs_authors"] = {  # two-sided: do our seeds differ from theirs?
                m: rank_test(cell["ours"][m]["seeds"], cell["authors"][m]["seeds"], "two-sided")
                for m in AUTHORS_METRICS}
          cells.append(cell)
          key = (arch, cell["point"])
          mean = cell["ours"]["train_acc"]["pixel"]["mean"]
          if mean is not None and mean > ours_best.get(key, (-1.0, None))[0]:
            ours_best[key] = (mean, cell, value)
  out_tests = []
  for better, worse in tests:
    for (arch, point), (_, cell, value) in sorted(ours_best.items(), key=lambda kv: kv[0]):
      if arch == better and (worse, point) in ours_best:
        out_tests.append(_test(cell, ours_best[(worse, point)][1], value,
                               authors.get(better), authors.get(worse)))
  return {"threshold": threshold, "case_rules": rules, "cells": cells, "tests": out_tests}


def _authors_sweep(cache: dict, authors_dir: Optional[str], arch: str):
  """The authors' sweep of ``arch`` (read once), or None where they stored none."""
  if authors_dir is None:
    return None
  if arch not in cache:
    stored = all(os.path.exists(os.path.join(authors_dir, f)) for f in authors_files(arch))
    cache[arch] = AuthorsSweep.read(authors_dir, arch) if stored else None
  return cache[arch]


def _archs(runs: list[OurSweep]) -> list[str]:
  """The runs' architectures, once each, in the paper's order (others after)."""
  order = list(AUTHORS_NAMES)
  return sorted(dict.fromkeys(arch for run in runs for arch in run.plan.archs),
                key=lambda a: order.index(a) if a in order else len(order))


def _our_field(sweep: AuthorsSweep) -> str:
  """Our config field of the hyper-parameter the authors swept."""
  if sweep.swept not in AUTHORS_FIELDS:
    raise ValueError(f"the authors swept {sweep.swept!r}, which is none of "
                     f"{tuple(AUTHORS_FIELDS)}")
  return AUTHORS_FIELDS[sweep.swept]


def _field_value(plan: SweepPlan, point: dict, field: str) -> float:
  """The value of ``field`` (e.g. "model.d_model") in a sweep at its static ``point``."""
  return float(get_field(plan.point_config(tuple(point.items())), field))


@dataclasses.dataclass(frozen=True)
class PixelGrids:
  """The paper's pixel plots, ours beside the authors', on one shared grid.

  Attributes:
    field: our config field of the columns, e.g. "model.d_model".
    learning_rates: the rows, largest first (the authors' plots' order).
    values: the columns, smallest first.
    images: ``{(arch, source, metric): float [rows, columns, 3]}``, source "ours" or "authors";
      R / G / B = min / mean / max over seeds, each at its best over training (``pixel``); NaN
      where the source has no such cell.
  """
  field: str
  learning_rates: np.ndarray
  values: np.ndarray
  images: Mapping

  @property
  def archs(self) -> list[str]:
    """The architectures of the images, in their first order."""
    return list(dict.fromkeys(arch for arch, _, _ in self.images))


def _union(arrays) -> np.ndarray:
  """The values of ``arrays`` once each (equal to 1% is one value), sorted ascending."""
  out = []
  for value in np.sort(np.concatenate([np.ravel(a) for a in arrays])):
    if not out or not _close(np.asarray(out[-1:]), value).any():
      out.append(float(value))
  return np.asarray(out)


def pixel_grids(runs: list[OurSweep], authors_dir: str) -> PixelGrids:
  """Every architecture of ``runs`` as the paper's pixel plots, ours and the authors', on the
  union of both grids (learning rate x the authors' swept hyper-parameter), so that one figure
  shows the whole of their sweep with the cells we ran in place.

  Args:
    runs: finished sweeps whose configs hold the field the authors swept.
    authors_dir: a folder of the authors' pickles (``AuthorsSweep.read``).

  Returns:
    The grids; an arch the authors stored no results for has NaN images of theirs.

  Raises:
    FileNotFoundError: the folder holds none of the runs' architectures.
  """
  archs = _archs(runs)
  check_authors_folder(authors_dir, archs)
  cache = {}
  theirs = {arch: _authors_sweep(cache, authors_dir, arch) for arch in archs}
  stored = [sweep for sweep in theirs.values() if sweep is not None]
  field = _our_field(stored[0])
  ours = [(arch, lr, _field_value(run.plan, point, field), run, point)
          for run in runs for point in run.points for arch in run.plan.archs
          for lr in run.learning_rates]
  rates = _union([s.learning_rates for s in stored] + [[lr for _, lr, *_ in ours]])[::-1]
  values = _union([s.values for s in stored] + [[v for _, _, v, *_ in ours]])
  images = {(arch, source, metric): np.full((rates.size, values.size, 3), np.nan)
            for arch in archs for source in ("authors", "ours") for metric in AUTHORS_METRICS}
  at = lambda lr, v: (_index_of(rates, lr, "learning_rate"), _index_of(values, v, field))
  for arch, lr, value, run, point in ours:
    for metric in AUTHORS_METRICS:
      images[(arch, "ours", metric)][at(lr, value)] = _rgb(run.seeds(arch, metric, lr, point))
  for arch, sweep in theirs.items():
    for lr in sweep.learning_rates if sweep is not None else ():
      for value in sweep.values:
        for metric in AUTHORS_METRICS:
          images[(arch, "authors", metric)][at(lr, value)] = _rgb(sweep.seeds(metric, lr, value))
  return PixelGrids(field, rates, values, images)


def _rgb(curves: np.ndarray) -> np.ndarray:
  """A cell's pixel (``pixel``) as R / G / B, NaN where a value is missing."""
  p = pixel(curves)
  return np.asarray([np.nan if p[k] is None else p[k] for k in ("min", "mean", "max")])


def _scores(read, threshold: float, rule: Optional[dict] = None) -> dict:
  """Per metric: each seed's best over training and the pixel values; for training accuracy
  also how many seeds learned: with a case ``rule``, the seeds that learned all three cases
  (also "cases" and "learned_all"), else those whose best reached ``threshold``."""
  out = {}
  for metric in AUTHORS_METRICS:
    curves = read(metric)
    best = best_per_seed(curves)
    out[metric] = {"seeds": [float(x) for x in best], "pixel": pixel(curves)}
  if rule is None:
    out["train_acc"]["learned"] = learned(out["train_acc"]["seeds"], threshold)
    return out
  out["cases"] = {case: [float(x) for x in best_per_seed(read(metric))]
                  for case, metric in zip(CASES, CASE_METRICS)}
  out["learned_all"] = learned_cases(out["cases"], rule["threshold"])
  out["train_acc"]["learned"] = int(sum(out["learned_all"]))
  return out


def _authors_best(sweep: AuthorsSweep, value: float) -> tuple[float, dict]:
  """The authors' best learning rate at ``value`` (best mean training accuracy over training)
  and the per-seed bests there, per metric."""
  means = [pixel(sweep.seeds("train_acc", lr, value))["mean"] for lr in sweep.learning_rates]
  lr = float(sweep.learning_rates[int(np.argmax(means))])
  return lr, {m: best_per_seed(sweep.seeds(m, lr, value)) for m in AUTHORS_METRICS}


def _test(better: dict, worse: dict, value, better_sweep, worse_sweep) -> dict:
  """The rank test of two archs' cells (each at its best learning rate), per metric; and the
  authors' same test where they stored both archs."""
  out = {"better": better["arch"], "worse": worse["arch"], "point": better["point"],
         "learning_rates": [better["learning_rate"], worse["learning_rate"]],
         "ours": {m: rank_test(better["ours"][m]["seeds"], worse["ours"][m]["seeds"])
                  for m in AUTHORS_METRICS}}
  if better_sweep is not None and worse_sweep is not None:
    (lr_a, a), (lr_b, b) = _authors_best(better_sweep, value), _authors_best(worse_sweep, value)
    out["authors_learning_rates"] = [lr_a, lr_b]
    out["authors"] = {m: rank_test(a[m], b[m]) for m in AUTHORS_METRICS}
  return out


def markdown(report: dict) -> str:
  """``compare_with_authors``'s report as two markdown tables: the cells seed by seed, and the
  tests (the authors' columns only where the report holds their seeds)."""
  pct = lambda xs: ", ".join(f"{100 * x:.1f}" for x in xs)
  pix = lambda p: " / ".join("-" if p[k] is None else f"{100 * p[k]:.1f}"
                             for k in ("min", "mean", "max"))
  lrs = lambda xs: " / ".join(f"{x:.3g}" for x in xs)
  with_authors = any("authors" in cell for cell in report["cells"])
  with_cases = any("case_rule" in cell for cell in report["cells"])
  without_cases = any("case_rule" not in cell for cell in report["cells"])
  threshold = f"train >= {100 * report['threshold']:g}%"
  if without_cases or not report["cells"]:
    lines = [f"Best accuracy over training per seed (%); {threshold}: seeds whose best training "
             "accuracy reaches it; pixel: min / mean / max over seeds."]
  else:
    lines = ["Best accuracy over training per seed (%); pixel: min / mean / max over seeds."]
  for rule in report.get("case_rules", ()):
    lines.append(
        f"Case task (N = {rule['seq_len']}, S = {rule['vocab_size']}): above the floor: seeds "
        f"whose best accuracy on each of the three cases (argmin / first / argmax, at N) exceeds "
        f"{100 * rule['threshold']:.2f}%: chance, the best input-independent guess on the argmin "
        f"and argmax cases ({100 * rule['chance']:.2f}%; 1/N = {100 / rule['seq_len']:.2f}%), "
        f"plus the larger of chance and {LEARNED_SE:g} binomial standard errors of chance on "
        f"{rule['case_set_size']} examples per case (the report card's rule; a floor above "
        "chance, not the NAP paper's \"learns all three cases\", which reads the mean over seeds "
        "of each case). The authors stored no per-case accuracies: their seeds cannot be placed "
        "against it (-).")
  if with_authors:
    lines.append("p: two-sided Mann-Whitney U test of our seeds against the authors', train / "
                 "validation.")
  columns = (["arch", "point", "learning rate", "source", "train, per seed"]
             + ["argmin / first / argmax, per seed"] * with_cases
             + ["above the floor" if with_cases else threshold, "train pixel",
                "validation, per seed", "validation pixel"]
             + ["p"] * with_authors)
  lines += ["", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
  for cell in report["cells"]:
    for source in ("ours", "authors"):
      if source in cell:
        s = cell[source]
        n, count = len(s["train_acc"]["seeds"]), s["train_acc"]["learned"]
        row = ([cell["arch"], cell["point"] or "-", f"{cell['learning_rate']:.3g}", source,
                pct(s["train_acc"]["seeds"])] + [_cases(s.get("cases"))] * with_cases
               + ["-" if count is None else f"{count}/{n}", pix(s["train_acc"]["pixel"]),
                  pct(s["val_acc"]["seeds"]), pix(s["val_acc"]["pixel"])])
        if with_authors:
          p = cell.get("ours_vs_authors") if source == "authors" else None
          row.append(f"{p['train_acc']:.2f} / {p['val_acc']:.2f}" if p else "")
        lines.append("| " + " | ".join(row) + " |")
  if report["tests"]:
    authors_tested = any("authors" in t for t in report["tests"])
    lines += ["", "One-sided Mann-Whitney U tests, each arch at its best learning rate (p-values"
              + ("; ours, then the authors' seeds):" if authors_tested else "):"), ""]
    columns = ["test", "point", "learning rates", "train p", "validation p"]
    if authors_tested:
      columns += ["learning rates, authors'", "train p", "validation p"]
    lines += ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for t in report["tests"]:
      row = [f"{t['better']} > {t['worse']}", t["point"] or "-", lrs(t["learning_rates"]),
             f"{t['ours']['train_acc']:.3f}", f"{t['ours']['val_acc']:.3f}"]
      if authors_tested:
        a = t.get("authors")
        row += ([lrs(t["authors_learning_rates"]), f"{a['train_acc']:.3f}",
                 f"{a['val_acc']:.3f}"] if a else ["-", "-", "-"])
      lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines)


def _cases(cases: Optional[Mapping]) -> str:
  """Per seed its best argmin / first / argmax accuracy (%), or "-" without them."""
  if cases is None:
    return "-"
  return ", ".join("/".join(f"{100 * x:.1f}" for x in seed)
                   for seed in zip(*(cases[case] for case in CASES)))


def __getattr__(name: str):
  """The previous release's names of this module (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)
