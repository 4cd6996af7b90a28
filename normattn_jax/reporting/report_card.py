"""The report card of one attention normalisation: the four papers' diagnostics at one scale.

A card trains the normalisation in the MTE layout (arch "mte", ``attention.name`` = it) on the
NAP paper's three tasks, each a sweep of a small learning-rate grid x seeds in its own folder of
the card's workdir (so the sweep engine resumes each); softmax (arch "mte") and NAP (arch
"nap") are trained once per scale in a shared folder of baselines that every card reads. Then
it scores:

- NAP paper: the case task (per-case accuracy), the first-token task (does a seed learn all
  three cases: ``learned_threshold``) and the mode task at S = 2N (validated at 2N), each arm
  at its best learning rate, seed by seed, with a two-sided Mann-Whitney test per comparison.
- DNAS paper: explaining away in the trained case-task models (keys whose total attention over
  the queries falls below 1e-8, and Theorem 2's bound 1/N), and the mode-collapse toy.
- LayerNorm paper: the share of unselectable keys of the trained case-task models, per head.
- Cost: time and memory of forward + backward against softmax, quadratic and fast paths.

Every analysis is stored as ``<name>.json`` once computed (a resumed card skips it); the card's
``config.json`` (normalisation, options, scale) refuses a workdir of another card, and
``report.md``, ``report.json`` and ``summary.json`` (last: a finished card) close it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable, Optional

import jax
import numpy as np

from normattn_jax._extras import require
from normattn_jax.analysis import cost as cost_lib
from normattn_jax.analysis import explaining_away as ea
from normattn_jax.analysis import mode_collapse as mc
from normattn_jax.analysis.unselectable import unselectable
from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.reporting import seeds as seeds_lib
from normattn_jax.tasks.synthetic import case_guess_rate
from normattn_jax.train import artifacts
from normattn_jax.train.checkpoint import ITEM, GridCheckpoints, open_workdir, releases_workdir, \
    write_json
from normattn_jax.train.config import PAPER_LEARNING_RATES, base_config
from normattn_jax.train.grid import Setup
from normattn_jax.train.sections import attention_section, attention_spec, \
    check_known_fields
from normattn_jax.train.sweep import run_sweep
from normattn_jax.validation import fail_config

# Optional packages: without them, the error names the extra that installs them.
ml_collections = require("ml_collections", "analysis")
ocp = require("orbax.checkpoint", "analysis")
epath = require("etils.epath", "analysis")

KIND = "report_card"  # the workdir kind (checkpoint.MAY_DIFFER)
CARD_ARCH = "mte"
BASELINE_ARCHS = ("mte", "nap")  # softmax in the MTE layout, and NAP
ARMS = ("card", "softmax", "nap")
CASES = ("argmin", "first", "argmax")
EPSILON = ea.EPSILON
# A seed learns a case when its best accuracy on that case beats chance (the best guess that
# ignores the input, synthetic.case_guess_rate) by at least chance itself and by
# seeds.LEARNED_SE binomial standard errors of chance on the case set (seeds.learned_threshold,
# shared with experiments/compare_seeds.py).
CASE_VOCAB = 100  # the case tasks' vocabulary (sweep_config)
UNSELECTABLE_TOL = 1e-6  # float32 keys (analysis.unselectable)
REPORT_MD, REPORT_JSON, SUMMARY = "report.md", "report.json", artifacts.SUMMARY


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
    learning_rates: the learning-rate grid.
    num_seeds: seeds per learning rate.
    val_batches: validation batches.
    case_set_size: examples per case of the per-case evaluation.
    probe_batch: sequences the trained models' attention is analysed on.
    cost_lengths: sequence lengths of the cost measurement.
    cost_repeats: timed calls per program.
    clusters: the mode-collapse toy's unbalanced cluster sizes (large, small).
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
  num_seeds: int
  val_batches: int
  case_set_size: int
  probe_batch: int
  cost_lengths: tuple
  cost_repeats: int
  clusters: tuple


SCALES = {
    # minutes on a CPU, nearly all of it compiling: for tests and for a first look at a plugin;
    # its numbers mean little
    "smoke": Scale(seq_len=8, d_model=8, num_heads=2, num_layers=2, batch_size=16,
                   num_steps=300, eval_every=100, mode_steps=300, mode_eval_every=100,
                   learning_rates=(0.027, 0.0081), num_seeds=2, val_batches=2,
                   case_set_size=50, probe_batch=4, cost_lengths=(128,), cost_repeats=1,
                   clusters=(100, 10)),
    # at most 20 minutes on 2 CPU cores per card, the baselines trained once per scale aside
    "cpu": Scale(seq_len=16, d_model=32, num_heads=4, num_layers=2, batch_size=32,
                 num_steps=2000, eval_every=100, mode_steps=2000, mode_eval_every=100,
                 learning_rates=(0.027, 0.0081, 0.00243), num_seeds=5, val_batches=8,
                 case_set_size=200, probe_batch=8, cost_lengths=(128, 1024, 4096),
                 cost_repeats=3, clusters=(500, 50)),
    # the NAP paper's sizes (Section 5; the mode task at S = 2N = 256 with 400 S steps, as its
    # Fig. 16), for a GPU
    "paper": Scale(seq_len=128, d_model=128, num_heads=4, num_layers=2, batch_size=32,
                   num_steps=3200, eval_every=100, mode_steps=400 * 256, mode_eval_every=3200,
                   learning_rates=PAPER_LEARNING_RATES, num_seeds=5, val_batches=32,
                   case_set_size=1000, probe_batch=4, cost_lengths=(128, 1024, 4096),
                   cost_repeats=5, clusters=(500, 50)),
}
# task of a card -> (registered task, output)
CARD_TASKS = {"case": ("case_distinction", "tokens"), "first_token": ("case_distinction", "first"),
         "mode": ("mode_finding", "classes")}


def base_card_config() -> ml_collections.ConfigDict:
  """A card's fields (``configs/report_card.py``): the ``attention`` section of every run kind
  (the normalisation, "" until one is named, and its options), the ``scale`` (a key of
  ``SCALES``), ``baselines_dir`` ("" for ``default_baselines_dir``) and ``show_progress`` (the
  sweeps' progress bars)."""
  return ml_collections.ConfigDict({"attention": attention_section(""), "scale": "smoke",
                                    "baselines_dir": "", "show_progress": True})


def validate_config(c: ml_collections.ConfigDict) -> AttentionSpec:
  """Check a card's config before anything is written or compiled.

  Returns:
    The card's normalisation.

  Raises:
    ValueError: ``config.<field>=<value>: <why>`` for the first unknown or bad field.
  """
  check_known_fields(c, base_card_config(), free=("attention.options",))
  if c.scale not in SCALES:
    fail_config("scale", c.scale, f"choose from {tuple(SCALES)}")
  if not isinstance(c.baselines_dir, str):
    fail_config("baselines_dir", c.baselines_dir, "must be a folder, or \"\" for the default")
  return attention_spec(c.attention, "attention")


def card_config(spec: AttentionSpec, scale: str) -> ml_collections.ConfigDict:
  """What a card's workdir belongs to (its ``config.json``): the normalisation, its options and
  the scale, which fix the card's results (where the baselines live and the progress bars do
  not), in the form the cards have always stored.

  Args:
    spec: the normalisation.
    scale: a key of ``SCALES``.

  Returns:
    ``{normalization, options, scale}``.
  """
  return ml_collections.ConfigDict({"normalization": spec.name, "options": dict(spec.options),
                                    "scale": scale})


def sweep_config(task: str, scale: str, archs: tuple,
                 spec: Optional[AttentionSpec] = None) -> ml_collections.ConfigDict:
  """The sweep of one task of a card (``spec``) or of the baselines (``spec=None``).

  Args:
    task: a key of ``CARD_TASKS``.
    scale: a key of ``SCALES``.
    archs: the architectures trained.
    spec: the card's normalisation on those archs, or None for their own.

  Returns:
    A sweep config (``train.config``).
  """
  s = SCALES[scale]
  c = base_config()
  c.archs = tuple(archs)
  if spec is not None:
    c.attention = attention_section(spec.name, **dict(spec.options))
  c.learning_rates = tuple(s.learning_rates)
  c.num_seeds = s.num_seeds
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


def default_baselines_dir(workdir: str, scale: str) -> str:
  """``<parent of workdir>/baselines/<scale>``: shared by the cards beside ``workdir``."""
  parent = os.path.dirname(os.path.normpath(os.path.abspath(workdir)))
  return os.path.join(parent, "baselines", scale)


@dataclasses.dataclass(frozen=True)
class Arm:
  """One trained arm of a comparison: an arch in a finished sweep."""
  label: str
  workdir: str
  arch: str

  def sweep(self) -> seeds_lib.OurSweep:
    return seeds_lib.OurSweep.read(self.workdir)


def arms(workdir: str, baselines_dir: str, task: str) -> dict:
  """The card's arm and the two baselines' of one task."""
  return {"card": Arm("card", os.path.join(workdir, task), CARD_ARCH),
          "softmax": Arm("softmax", os.path.join(baselines_dir, task), "mte"),
          "nap": Arm("nap", os.path.join(baselines_dir, task), "nap")}


def best_learning_rate(run: seeds_lib.OurSweep, arch: str) -> float:
  """The paper's pick: the learning rate of the best mean training accuracy (seeds each at
  their best over training); the first where every one failed."""
  means = [seeds_lib.pixel(run.seeds(arch, "train_acc", lr))["mean"] for lr in run.learning_rates]
  means = [-1.0 if m is None else m for m in means]
  return run.learning_rates[int(np.argmax(means))]


def arm_seeds(arm: Arm, metrics: tuple) -> dict:
  """An arm's per-seed best (over training) of each metric, at its best learning rate.

  Args:
    arm: the arm.
    metrics: metric names of its sweep.

  Returns:
    ``{"learning_rate": lr, metric: [per seed]}``.
  """
  run = arm.sweep()
  lr = best_learning_rate(run, arm.arch)
  out = {"learning_rate": lr}
  for metric in metrics:
    best = seeds_lib.best_per_seed(run.seeds(arm.arch, metric, lr))
    out[metric] = [float(x) for x in np.nan_to_num(best, nan=0.0)]
  return out


def task_scores(task: str, scale: str, task_arms: dict) -> dict:
  """One task's numbers: each arm's seeds at its best learning rate, the learned-cases count
  (case tasks) and the two-sided rank tests of the card against each baseline.

  Args:
    task: a key of ``CARD_TASKS``.
    scale: a key of ``SCALES``.
    task_arms: ``arms(...)`` of the task.

  Returns:
    ``{"arms": {label: {...}}, "tests": {baseline: {metric: p}}, "threshold"?}``.
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
  card = out["arms"]["card"]
  out["tests"] = {base: {m: seeds_lib.rank_test(card[m], out["arms"][base][m], "two-sided")
                         for m in ("train_acc", "val_acc")} for base in ("softmax", "nap")}
  return out


def final_states(arm: Arm) -> tuple:
  """The arm's sweep config, its best learning rate's models' parameters (one per seed) and
  the ``Setup`` that builds its model.

  Args:
    arm: an arm of a finished sweep with checkpoints.

  Returns:
    ``(config, [params per seed], setup)``.
  """
  run = arm.sweep()
  config, lr = run.config, best_learning_rate(run, arm.arch)
  lr_index = int(np.argmin(np.abs(np.log(np.asarray(run.learning_rates) / lr))))
  checkpoints = GridCheckpoints(os.path.join(arm.workdir, "checkpoints",
                                             run.plan.grid(arm.arch).name))
  try:
    step = checkpoints.latest()
    if step is None:
      raise FileNotFoundError(f"{arm.workdir}: no checkpoint of {arm.arch!r} to analyse")
    handler = ocp.StandardCheckpointHandler()  # no target: the arrays as saved
    try:
      tree = handler.restore(epath.Path(checkpoints.directory) / str(step) / ITEM)
    finally:
      handler.close()
  finally:
    checkpoints.close()
  rows = run.plan.axis.rows(lr_index, 0)
  params = [jax.tree.map(lambda a, r=r: np.asarray(a[r]), tree["state"]["params"]) for r in rows]
  return config, params, Setup(arm.arch, config)


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
    Rows ``{n, path, mode, seconds, bytes, softmax_seconds, softmax_bytes}`` (None where a
    program was not run; the fast path only where the normalisation has one).
  """
  rows = []
  for n in lengths:
    measured = cost_lib.measure([spec, "softmax"], n, repeats)
    for (name, path, mode), c in measured.items():
      if name == str(spec):
        ref = measured.get(("softmax", path, mode), {})
        rows.append({"n": n, "path": path, "mode": mode, **c,
                     "softmax_seconds": ref.get("seconds"), "softmax_bytes": ref.get("bytes")})
  return rows


def cached(path: str, compute: Callable[[], object]):
  """``compute()``, stored as JSON at ``path`` (whole or not at all), or read back from it."""
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  value = compute()
  write_json(path, value, indent=1)
  return value


def train_all(spec: AttentionSpec, scale: str, workdir: str, baselines_dir: str,
              show_progress: bool) -> dict:
  """Every task's baselines (shared, trained once) and card sweep, each sweep's figures drawn
  when it finishes.

  Args:
    spec: the card's normalisation.
    scale: a key of ``SCALES``.
    workdir: the card's folder.
    baselines_dir: the shared baselines' folder.
    show_progress: progress bars.

  Returns:
    ``{"<card|baselines>/<task>": seconds}`` of the sweeps trained by a call of this card
    (``timing.json``, kept over resumes; None: found finished, e.g. baselines of another card).
  """
  from normattn_jax.reporting import figures  # matplotlib only when drawing
  path = os.path.join(workdir, "timing.json")
  seconds = cached(path, dict)
  for task in CARD_TASKS:
    for label, folder, archs, own in (("baselines", baselines_dir, BASELINE_ARCHS, None),
                                      ("card", workdir, (CARD_ARCH,), spec)):
      sweep_dir = os.path.join(folder, task)
      finished = os.path.exists(os.path.join(sweep_dir, SUMMARY))
      start = time.perf_counter()
      run_sweep(sweep_config(task, scale, archs, own), sweep_dir, show_progress=show_progress,
                tensorboard=False)
      if not finished:
        figures.draw_finished_sweep(sweep_dir)
      key = f"{label}/{task}"
      if not finished or key not in seconds:
        seconds[key] = None if finished else time.perf_counter() - start
        write_json(path, seconds, indent=1)
  return seconds


@releases_workdir
def run(config: ml_collections.ConfigDict, workdir: str, *, afresh: bool = False) -> dict:
  """Make (or resume, or read back) the report card of one normalisation.

  Args:
    config: the card's config (``base_card_config`` with overrides).
    workdir: the card's folder; one of another normalisation, options or scale is refused.
    afresh: move an existing workdir aside first.

  Returns:
    The report (as ``report.json`` holds it).

  Raises:
    ValueError: for a bad config field (an unknown normalisation, a refused option, an unknown
      scale), before anything is written; on several hosts (a card writes its files from one).
    WorkdirError: for a workdir of another card.
  """
  from normattn_jax.reporting import report_card_text as text  # matplotlib only when writing
  if jax.process_count() > 1:
    raise ValueError(f"a report card runs on one host, not {jax.process_count()} "
                     "(its sweeps, analyses and files are one process's)")
  spec = validate_config(config)
  scale, show_progress = config.scale, config.show_progress
  baselines_dir = config.baselines_dir or default_baselines_dir(workdir, scale)
  if open_workdir(workdir, card_config(spec, scale), KIND, afresh=afresh) is not None:
    with open(os.path.join(workdir, REPORT_JSON)) as f:
      return json.load(f)
  started = time.perf_counter()
  seconds = train_all(spec, scale, workdir, baselines_dir, show_progress)
  s = SCALES[scale]
  report = {"normalization": str(spec), "name": spec.name, "options": dict(spec.options),
            "scale": scale, "sizes": dataclasses.asdict(s),
            "baselines_dir": os.path.relpath(baselines_dir, workdir),  # the card's folder moves
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
  report["seconds"] = {"sweeps": seconds, "this_call": time.perf_counter() - started}
  report["verdicts"] = text.verdicts(report)
  text.accuracy_figure(report, os.path.join(workdir, "accuracy.png"))
  with open(os.path.join(workdir, REPORT_MD), "w") as f:
    f.write(text.markdown(report))
  write_json(os.path.join(workdir, REPORT_JSON), report, indent=1)
  write_json(os.path.join(workdir, SUMMARY), {"report": REPORT_JSON,
                                              "verdicts": report["verdicts"]}, indent=1)
  return report
