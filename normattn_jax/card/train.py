"""The report card of one attention normalisation: the four papers' diagnostics, and what
today's normalisations' own papers claim, at one scale, each comparison with its confidence.

Every arm (the card's normalisation in the MTE layout, arch "mte" with ``attention.name`` = it;
softmax in the MTE layout; NAP) goes through two stages per task of the NAP paper: its learning
rate is **selected** on the selection seeds (a sweep of the scale's learning rates, the best mean
training accuracy), then it is trained again at that rate on fresh **evaluation** seeds (another
base seed), and every verdict is made on those alone, so that no arm's luck in the selection
counts twice. Each sweep has its own folder (the sweep engine resumes each); the baselines'
folder is shared by every card of one scale **on one machine** (``machine.json``: the
fingerprint of ``_extras.machine_fingerprint``; the default folder is named by it, a named
folder of another machine is refused), and ``provenance.json`` there says which card trained
each baseline. A small causal LM per arm (``card.lm``) serves the registered
diagnostics (``card.diagnostics``: length generalisation, attention sinks, massive
activations, sparsity, and a plugin's own).

Then it scores, each against softmax and NAP with ``card_stats.compare`` (the difference of the
means with a 95% bootstrap interval, Cliff's delta and a Mann-Whitney p), Benjamini-Hochberg
over the card's comparisons:

- NAP paper: the case task, the first-token task (does a seed learn all three cases:
  ``learned_threshold``) and the mode task at S = 2N (validated at 2N).
- DNAS paper: explaining away in the trained case-task models (keys whose total attention over
  the queries falls below 1e-8; Theorem 2's bound 1/N is a check: DNAS, HNAS and Sinkhorn meet
  it by construction), and the mode-collapse toy, both cluster pairs.
- LayerNorm paper: the share of unselectable keys of the trained case-task models, per head.
- Cost: time and memory of forward + backward against softmax's quadratic path.
- The registered diagnostics on the LMs.

Every analysis is stored as ``<name>.json`` once computed (a resumed card skips it); the card's
``config.json`` (normalisation, options, scale, machine) refuses a workdir of another card or
machine, and ``report.md``, ``report.json`` and ``summary.json`` (last: a finished card) close it.
"""
from __future__ import annotations

import dataclasses
import json
import os
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
from normattn_jax.card import stats as card_stats
from normattn_jax.card import diagnostics as diagnostics_lib
from normattn_jax.card import text
from normattn_jax.sweep import seeds as seeds_lib
from normattn_jax.card.names import ARMS, BASELINES, CARD_TASKS, CASES, TASK_METRIC
from normattn_jax.tasks.synthetic import case_guess_rate
from normattn_jax.sweep import artifacts
from normattn_jax.train import kinds, runs
from normattn_jax.train.checkpoint import WorkdirError, write_json
from normattn_jax.sweep.config import PAPER_LEARNING_RATES, base_config
from normattn_jax.sweep.programs import Setup
from normattn_jax.attention.section import attention_section, attention_spec
from normattn_jax.validation import check_known_fields
from normattn_jax.sweep.train import load_models, run_sweep
from normattn_jax.validation import check_bool_fields, fail_config

# Optional packages: without them, the error names the extra that installs them.
ml_collections = require("ml_collections", "analysis")

KIND = "report_card"  # the kind of run (train.kinds)
PROTOCOL = 2  # selection seeds apart from evaluation seeds; report.json's "protocol"
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


SCALES = {
    # minutes on a CPU, nearly all of it compiling: for tests and for a first look at a plugin;
    # its numbers mean little
    "smoke": Scale(seq_len=8, d_model=8, num_heads=2, num_layers=2, batch_size=16,
                   num_steps=300, eval_every=100, mode_steps=300, mode_eval_every=100,
                   learning_rates=(0.027, 0.0081), selection_seeds=2, evaluation_seeds=4,
                   val_batches=2, case_set_size=50, probe_batch=4, cost_lengths=(128,),
                   cost_repeats=1, clusters=(100, 10), lm=card_lm.LM_SIZES["smoke"]),
    # 2 CPU cores: REPORT_CARDS.md states the measured minutes of a card, baselines found
    "cpu": Scale(seq_len=16, d_model=32, num_heads=4, num_layers=2, batch_size=32,
                 num_steps=2000, eval_every=100, mode_steps=2000, mode_eval_every=100,
                 learning_rates=(0.027, 0.0081, 0.00243), selection_seeds=5,
                 evaluation_seeds=20, val_batches=8, case_set_size=200, probe_batch=8,
                 cost_lengths=(128, 2048), cost_repeats=3, clusters=(500, 50),
                 lm=card_lm.LM_SIZES["cpu"]),
    # the NAP paper's sizes (Section 5; the mode task at S = 2N = 256 with 400 S steps, as its
    # Fig. 16), for a GPU
    "paper": Scale(seq_len=128, d_model=128, num_heads=4, num_layers=2, batch_size=32,
                   num_steps=3200, eval_every=100, mode_steps=400 * 256, mode_eval_every=3200,
                   learning_rates=PAPER_LEARNING_RATES, selection_seeds=5, evaluation_seeds=20,
                   val_batches=32, case_set_size=1000, probe_batch=4,
                   cost_lengths=(128, 1024, 4096), cost_repeats=5, clusters=(500, 50),
                   lm=card_lm.LM_SIZES["paper"]),
}


def base_card_config() -> ml_collections.ConfigDict:
  """A card's fields (the ``report_card`` config): the ``attention`` section of every run kind
  (the normalisation, "" until one is named, and its options), the ``scale`` (a key of
  ``SCALES``), ``baselines_dir`` ("" for ``default_baselines_dir``), ``cache_dir`` (where the
  LM's corpus is kept; "" for ``~/.cache/normattn_jax``) and ``show_progress`` (the sweeps'
  progress bars)."""
  return ml_collections.ConfigDict({"kind": KIND, "attention": attention_section(""),
                                    "scale": "smoke",
                                    "baselines_dir": "", "cache_dir": "",
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
  spec = attention_spec(c.attention, "attention")
  probe_weights(spec)
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
                 learning_rate: Optional[float] = None) -> ml_collections.ConfigDict:
  """The sweep of one task and stage of a card (``spec``) or of the baselines (``spec=None``).

  Args:
    task: a key of ``CARD_TASKS``.
    scale: a key of ``SCALES``.
    archs: the architectures trained.
    spec: the card's normalisation on those archs, or None for their own.
    learning_rate: None for the selection (the scale's learning rates x its selection seeds,
      base seed ``SELECTION_SEED``); a rate for the evaluation (that rate x the evaluation
      seeds, base seed ``EVALUATION_SEED``).

  Returns:
    A sweep config (``sweep.config``).
  """
  s = SCALES[scale]
  c = base_config()
  c.archs = tuple(archs)
  if spec is not None:
    c.attention = attention_section(spec.name, **dict(spec.options))
  if learning_rate is None:
    c.learning_rates, c.num_seeds, c.seed = (tuple(s.learning_rates), s.selection_seeds,
                                             SELECTION_SEED)
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
  """One arm of a comparison: an arch selected in one sweep, evaluated in another."""
  label: str
  select_dir: str
  evaluate_dir: str
  arch: str

  def selection(self) -> seeds_lib.OurSweep:
    """The selection sweep (the learning-rate grid, the selection seeds), which picks the rate."""
    return seeds_lib.OurSweep.read(self.select_dir)

  def sweep(self) -> seeds_lib.OurSweep:
    """The evaluation sweep (one learning rate, the evaluation seeds)."""
    return seeds_lib.OurSweep.read(self.evaluate_dir)


def arms(workdir: str, baselines_dir: str, task: str) -> dict:
  """The card's arm and the two baselines' of one task."""
  card, base = os.path.join(workdir, task), os.path.join(baselines_dir, task)
  return {"card": Arm("card", os.path.join(card, "select"), os.path.join(card, "evaluate"),
                      CARD_ARCH),
          **{label: Arm(label, os.path.join(base, "select"),
                        os.path.join(base, f"evaluate_{arch}"), arch)
             for label, arch in zip(BASELINES, BASELINE_ARCHS)}}


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


def selection_means(run: seeds_lib.OurSweep, arch: str) -> list:
  """Each learning rate's mean training accuracy over the seeds (each at its best over
  training); None where every seed failed."""
  return [seeds_lib.pixel(run.seeds(arch, "train_acc", lr))["mean"] for lr in run.learning_rates]


def best_learning_rate(run: seeds_lib.OurSweep, arch: str) -> float:
  """The paper's pick: the learning rate of the best mean training accuracy (seeds each at
  their best over training); the first where every one failed."""
  means = [-1.0 if m is None else m for m in selection_means(run, arch)]
  return run.learning_rates[int(np.argmax(means))]


def arm_seeds(arm: Arm, metrics: tuple) -> dict:
  """An arm's selection and its evaluation seeds' best (over training) of each metric.

  Args:
    arm: the arm, both stages trained.
    metrics: metric names of its sweeps.

  Returns:
    ``{"learning_rate": the selected rate, "selection": {"learning_rates", "train_acc_means"},
    metric: [per evaluation seed]}``.
  """
  selection = arm.selection()
  run = arm.sweep()
  lr = run.learning_rates[0]
  out = {"learning_rate": lr,
         "selection": {"learning_rates": list(selection.learning_rates),
                       "train_acc_means": selection_means(selection, arm.arch)}}
  for metric in metrics:
    best = seeds_lib.best_per_seed(run.seeds(arm.arch, metric, lr))
    out[metric] = [float(x) for x in np.nan_to_num(best, nan=0.0)]
  return out


def task_scores(task: str, scale: str, task_arms: dict) -> dict:
  """One task's numbers: each arm's selection and evaluation seeds and, for the case tasks,
  which seeds learn all three cases.

  Args:
    task: a key of ``CARD_TASKS``.
    scale: a key of ``SCALES``.
    task_arms: ``arms(...)`` of the task.

  Returns:
    ``{"arms": {label: {...}}, "threshold"?, "chance"?}``.
  """
  cased = CARD_TASKS[task][0] == "case_distinction"
  metrics = ("train_acc", "val_acc") + tuple(f"case_acc_{c}" for c in CASES) * cased
  out = {"arms": {label: arm_seeds(arm, metrics) for label, arm in task_arms.items()}}
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


def attention_scores(arm: Arm, probe_batch: int) -> dict:
  """Explaining away and unselectable keys of an arm's trained case-task models, per seed.

  Args:
    arm: an arm of the case task.
    probe_batch: sequences per model.

  Returns:
    Per seed lists: ``explained_away`` (share of keys whose total absolute attention weight over
    the queries is below ``EPSILON``), ``below_bound`` (share below Theorem 2's 1/N),
    ``min_sum_times_n`` and ``unselectable`` (share of keys no query can select, per head).
  """
  config, params, setup = final_states(arm)
  n = config.task.seq_len
  tokens, _ = setup.sample(jax.random.key(123), probe_batch, n)
  model = setup.model()
  out = {"explained_away": [], "below_bound": [], "min_sum_times_n": [], "unselectable": []}
  for p in params:
    weights = ea.attention_weights(model, p, tokens)
    sums = np.concatenate([ea.key_weight_sums(np.abs(np.asarray(w))).ravel() for w in weights])
    out["explained_away"].append(ea.explained_away_fraction(sums))
    out["below_bound"].append(float(np.mean(sums < (1.0 / n) * (1 - 1e-4))))
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
  seconds each took in the call that trained it (None: found finished), the baselines'
  ``provenance.json`` which card trained each of theirs, and ``trained`` the seconds of this
  call's trainings (the rest of a call is its analyses)."""

  def __init__(self, spec: AttentionSpec, workdir: str, baselines_dir: str):
    self.card, self.workdir, self.baselines_dir = str(spec), workdir, baselines_dir
    self.timing_path = os.path.join(workdir, "timing.json")
    self.seconds = cached(self.timing_path, dict)
    self.trained = 0.0  # seconds of the trainings this call ran

  def __call__(self, key: str, folder: str, train: Callable[[], object], done: str = SUMMARY):
    """``train()`` (a run that resumes in ``folder`` or returns its finished result), timed
    under ``key`` ("card/..." or "baselines/..."); ``done``: the file that a finished run has
    written last."""
    finished = os.path.exists(os.path.join(folder, done))
    start = time.perf_counter()
    result = train()
    self.trained += 0.0 if finished else time.perf_counter() - start
    if not finished or key not in self.seconds:
      self.seconds[key] = None if finished else time.perf_counter() - start
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


def train_all(spec: AttentionSpec, scale: str, trainer: Trainer, show_progress: bool) -> None:
  """Every task's two stages for the baselines (shared, trained once per machine) and the card
  (their figures: ``reporting.drawers``).

  Args:
    spec: the card's normalisation.
    scale: a key of ``SCALES``.
    trainer: the card's ``Trainer``.
    show_progress: progress bars.
  """
  def sweep(key, folder, config):
    trainer(key, folder, lambda: run_sweep(config, folder, show_progress=show_progress,
                                           tensorboard=False))

  for task in CARD_TASKS:
    task_arms = arms(trainer.workdir, trainer.baselines_dir, task)
    sweep(f"baselines/{task}/select", task_arms["softmax"].select_dir,
          sweep_config(task, scale, BASELINE_ARCHS))
    sweep(f"card/{task}/select", task_arms["card"].select_dir,
          sweep_config(task, scale, (CARD_ARCH,), spec))
    for label, arm in task_arms.items():
      lr = best_learning_rate(arm.selection(), arm.arch)
      own = spec if label == "card" else None
      sweep(_run_key(label, f"{task}/evaluate", arm.arch), arm.evaluate_dir,
            sweep_config(task, scale, (arm.arch,), own, lr))


def lm_dirs(workdir: str, baselines_dir: str) -> dict:
  """Each arm's LM folder: the card's in its own, the baselines' in theirs."""
  return {"card": os.path.join(workdir, "lm"),
          **{label: os.path.join(baselines_dir, f"lm_{label}") for label in BASELINES}}


def train_lms(spec: AttentionSpec, scale: str, trainer: Trainer, cache_dir: str) -> dict:
  """Each arm's causal LM (``card_lm.run_lm``) on the evaluation seeds: the card's
  normalisation, softmax and NAP in the same decoder.

  Returns:
    ``{arm: run_lm's result}``; the card's is None for a normalisation that is not causal-safe
    (no causal LM: ``diagnostics.lms``).
  """
  s = SCALES[scale]
  specs = {"card": spec, "softmax": AttentionSpec.of("softmax"), "nap": AttentionSpec.of("nap")}
  out = {"card": None}
  for label, folder in lm_dirs(trainer.workdir, trainer.baselines_dir).items():
    if label == "card" and not spec.normalization.causal_safe:
      continue
    train = lambda label=label, folder=folder: card_lm.run_lm(
        specs[label], s.lm, seed=EVALUATION_SEED, num_seeds=s.evaluation_seeds, workdir=folder,
        cache_dir=cache_dir, log=lambda *_: None)
    out[label] = trainer(_run_key(label, "lm", label), folder, train, done=card_lm.RESULT)
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
  quantities.

  Returns:
    ``{key: {"label", "percent", "values": {arm: [per evaluation seed, None if missing]}}}``.
  """
  out = {}

  def add(key, label, percent, values):
    out[key] = {"label": label, "percent": percent,
                "values": {arm: [None if v is None else float(v) for v in values[arm]]
                           for arm in ARMS}}

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
  for name, entry in report["diagnostics"].items():
    for q in entry.get("quantities", ()) if "values" in entry else ():
      add(f"{name}.{q['key']}", q["label"], q["percent"],
          {arm: entry["values"][arm][q["key"]] for arm in ARMS})
  return out


def comparisons(measured: dict) -> dict:
  """Each measure's card against each baseline (``card_stats.compare``), with q: the
  Benjamini-Hochberg adjusted p over all of this card's comparisons.

  Returns:
    ``{key: {baseline: {difference, ci, effect, p, n, q} or {"error": why}}}``.
  """
  out = {key: {} for key in measured}
  for key, m in measured.items():
    for base in BASELINES:
      try:
        out[key][base] = card_stats.compare(m["values"]["card"], m["values"][base])
      except ValueError as err:  # too few seeds with a value
        out[key][base] = {"error": str(err)}
  tested = [c for per in out.values() for c in per.values() if "p" in c]
  for c, q in zip(tested, card_stats.controlled([c["p"] for c in tested])):
    c["q"] = q
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


def make_card(config: ml_collections.ConfigDict, context) -> dict:
  """The report card kind's ``train``: its sweeps (the baselines' shared), LMs and analyses,
  each resumed or read back; returns the report (its verdicts: ``summarise_card``)."""
  spec = attention_spec(config.attention, "attention")
  scale, workdir = config.scale, context.workdir
  fingerprint = machine_fingerprint()
  baselines_dir = baselines_of(config, workdir, fingerprint)
  claim_baselines(baselines_dir, fingerprint)
  started = time.perf_counter()
  trainer = Trainer(spec, workdir, baselines_dir)
  train_all(spec, scale, trainer, config.show_progress and context.show_progress)
  lms = train_lms(spec, scale, trainer, config.cache_dir or default_cache_dir())
  s = SCALES[scale]
  report = {"protocol": PROTOCOL, "normalization": str(spec), "name": spec.name,
            "options": dict(spec.options), "scale": scale, "sizes": dataclasses.asdict(s),
            "machine": fingerprint,
            "baselines": {"dir": os.path.relpath(baselines_dir, workdir),  # the card moves
                          "trained_by": {key: entry["trained_by"] for key, entry in
                                         sorted(_provenance(baselines_dir).items())}},
            "tasks": {task: task_scores(task, scale, arms(workdir, baselines_dir, task))
                      for task in CARD_TASKS}}
  case_arms = arms(workdir, baselines_dir, "case")
  report["attention"] = {
      label: cached(os.path.join(folder, f"attention_{label}.json"),
                    lambda arm=arm: attention_scores(arm, s.probe_batch))
      for label, arm in case_arms.items()
      for folder in [workdir if label == "card" else os.path.join(baselines_dir, "case")]}
  report["mode_collapse"] = cached(os.path.join(workdir, "mode_collapse.json"),
                                   lambda: mode_collapse_scores(spec, s.clusters))
  report["cost"] = cached(os.path.join(workdir, "cost.json"),
                          lambda: cost_scores(spec, s.cost_lengths, s.cost_repeats))
  report["diagnostics"] = run_diagnostics(diagnostics_lib.CardContext(spec, scale, s, lms))
  report["measures"] = measures(report)
  report["comparisons"] = comparisons(report["measures"])
  this_call = time.perf_counter() - started
  report["seconds"] = {"sweeps": trainer.seconds, "this_call": this_call,
                       "analyses": this_call - trainer.trained}
  return report


def summarise_card(config: ml_collections.ConfigDict, report: dict) -> dict:
  """The report card kind's ``summary.json``: where its report is, and its verdicts."""
  return {"report": REPORT_JSON, "verdicts": text.verdicts(report)}


def write_card(workdir: str, config: ml_collections.ConfigDict, report: dict) -> None:
  """The report card kind's ``save``: ``report.md`` and ``report.json``."""
  text.write_report(report, workdir)


def describe(summary: dict) -> list[str]:
  """A card's verdicts, and where its report is."""
  return list(summary["verdicts"].values()) + [f"report: {summary['report']} (and report.md)"]


def run(config: ml_collections.ConfigDict, workdir: str, *, afresh: bool = False) -> dict:
  """``runs.run`` of a card's config: make (or resume, or read back) the report card of one
  normalisation.

  Args:
    config: the card's config (``base_card_config`` with overrides).
    workdir: the card's folder; one of another normalisation, options, scale or machine is
      refused.
    afresh: move an existing workdir aside first.

  Returns:
    The report (as ``report.json`` holds it).

  Raises:
    ValueError: for a bad config field (an unknown normalisation, a refused option, an unknown
      scale, baselines of another machine), before anything is written; on several hosts (a
      card writes its files from one).
    WorkdirError: for a workdir of another card.
  """
  kinds.check_kind(config, KIND)
  runs.run(config, workdir, afresh=afresh, show_progress=config.show_progress,
           tensorboard=False)
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
