"""Run a whole sweep: for every static point (shape sweeps) and architecture, train the grid of
models (``programs.build_grid`` on the engine's ``run_grid``), resuming from checkpoints, then
score it (``scoring``) and write ``metrics.npz`` and ``summary.json`` (``artifacts``); the
command line draws the figures (``normattn_jax.reporting.drawers``).

The grids train longest first (``SweepPlan.training_order``) while the programs of the grids
after them are compiled, one after another, in a background thread (``BUILT_AHEAD``); each
grid's compiles and seconds (building, waiting for the build, training, checkpoints) go to
``timing.json`` and one log line (``train.timing``).

One ``RunLog`` per workdir logs every grid: ``history.jsonl`` and TensorBoard get, per grid,
learning rate and evaluation, the mean over that learning rate's models of ``LOGGED``. A resumed
sweep starts its log empty and each grid replays the rows of the evaluations its checkpoint
restored (the checkpoint holds their metrics) before it logs new ones: rows past a checkpoint,
which will be trained again, are not kept twice, and the history ends as an uninterrupted
run's, row for row.
"""
from __future__ import annotations

import concurrent.futures
import os
import time
from typing import Optional

import jax
import ml_collections
import numpy as np

from normattn_jax.sweep import artifacts
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep.layout import ModelsAxis
from normattn_jax.sweep.migrate import migrate_sweep
from normattn_jax.sweep.plan import SweepGrid, SweepPlan
from normattn_jax.sweep.programs import Setup, build_grid, compile_threads
from normattn_jax.sweep.scoring import best_lines, summarise
from normattn_jax.train import kinds, multihost, runs
from normattn_jax.train.checkpoint import GridCheckpoints, restore_newest_state, write_json
from normattn_jax.train.driver import Budget, RunHooks
from normattn_jax.train.grid import Grid, model_keys
from normattn_jax.train.run_log import RunLog
from normattn_jax.train.runs import RunContext
from normattn_jax.train.timing import GridTiming, Stopwatch, counting

# The metrics a sweep's history.jsonl and TensorBoard follow, per grid and learning rate.
LOGGED = ("train_loss", "train_acc", "val_acc")
# Grids compiled in the background ahead of the one training (``programs.compile_threads`` at
# once): None every one (a long grid's training hides the compiles of the short ones after it),
# k the next k, 0 none (each compiled in its turn, the devices idle meanwhile).
BUILT_AHEAD: Optional[int] = None
# The workdir's record of where each grid's time went in the last call (``GridTiming``).
TIMING = "timing.json"


def log_evaluations(log: RunLog, name: str, axis: ModelsAxis, every: int, metrics: dict,
                    indices) -> None:
  """Record, per evaluation in ``indices`` and learning rate, the mean of ``LOGGED`` over that
  learning rate's models (swept values and seeds).

  Args:
    log: the sweep's log.
    name: the grid's name (``layout.grid_name``), the rows' ``grid`` label.
    axis: the grid's models axis.
    every: training steps between evaluations.
    metrics: ``{name: [evaluations, models]}``.
    indices: the evaluations to record, 0 the first.
  """
  lr_index = axis.lr_indices()
  for index in indices:
    for i, learning_rate in enumerate(axis.learning_rates):
      models = lr_index == i
      log.record((index + 1) * every,
                 {key: float(np.mean(metrics[key][index, models])) for key in LOGGED},
                 grid=name, learning_rate=f"{learning_rate:g}")


def build_point(plan: SweepPlan, grid: SweepGrid) -> tuple[Grid, GridTiming]:
  """Compile one grid of a sweep (``programs.build_grid``), in whichever thread calls it.

  Args:
    plan: the sweep's plan.
    grid: one of ``plan.grids``.

  Returns:
    The compiled ``Grid`` and its ``GridTiming``, its compiles and build seconds filled in.
  """
  point = plan.point_config(grid.point)
  with Stopwatch() as watch:
    built = build_grid(Setup(grid.arch, point, plan.attention[grid.point]), plan.axis.num_models)
  timing = GridTiming(build_seconds=watch.seconds)
  timing.compiles.add(built.compiles)
  return built, timing


def checkpoint_folder(workdir, grid: SweepGrid) -> str:
  """Where a grid's checkpoints are: ``checkpoints/<grid name>`` in the sweep's workdir."""
  return os.path.join(workdir, "checkpoints", grid.name)


def num_evaluations(point: ml_collections.ConfigDict) -> int:
  """The evaluations (chunks) a grid of the point's config trains in."""
  return point.train.num_steps // point.train.eval_every


def grid_hooks(plan: SweepPlan, grid: SweepGrid, workdir, log: RunLog,
               budget: Optional[Budget] = None) -> RunHooks:
  """The ``RunHooks`` of one grid of a sweep: its checkpoints in ``checkpoints/<grid name>``,
  each evaluation logged (``log_evaluations``) and counted in model-steps, the sweep's budget."""
  point, axis, name = plan.point_config(grid.point), plan.axis, grid.name
  every = point.train.eval_every

  def record(indices, metrics):
    log_evaluations(log, name, axis, every, metrics, indices)
    log.advance(len(indices) * every * axis.num_models)
  return RunHooks(checkpoint_folder(workdir, grid), point.train.checkpoint_every,
                  num_evaluations(point), record=record, budget=budget, name=name,
                  minutes=point.train.checkpoint_minutes)


def last_chunk_saved(plan: SweepPlan, grid: SweepGrid, workdir) -> bool:
  """Whether the grid's newest checkpoint is of its last evaluation (a finished grid, which a
  resumed sweep does not compile), read without creating its folder."""
  folder = checkpoint_folder(workdir, grid)
  if not os.path.isdir(folder):
    return False
  checkpoints = GridCheckpoints(folder)
  try:
    return checkpoints.latest() == num_evaluations(plan.point_config(grid.point))
  finally:
    checkpoints.close()


def train_point(plan: SweepPlan, grid: SweepGrid, workdir, log: RunLog,
                budget: Optional[Budget] = None, built: Optional[Grid] = None,
                timing: Optional[GridTiming] = None) -> dict:
  """Train (or resume) one grid of a sweep: an arch at one static point.

  Args:
    plan: the sweep's plan.
    grid: one of ``plan.grids``.
    workdir: the sweep's workdir; checkpoints go to ``checkpoints/<grid name>``.
    log: the sweep's log (rows, TensorBoard, progress).
    budget: evaluations this call may run before ``Interrupted``; None: no limit.
    built: the grid's compiled programs (``build_point``); None compiles them here.
    timing: where its training's compiles and seconds are added; None: nowhere.

  Returns:
    The metrics ``{name: [evaluations, models]}``.
  """
  point = plan.point_config(grid.point)
  timing = timing or GridTiming()
  if built is None:
    built, _ = build_point(plan, grid)
  hooks = grid_hooks(plan, grid, workdir, log, budget)
  keys, watch = model_keys(point.seed, plan.axis.seed_indices()), Stopwatch()
  try:
    with counting(timing.compiles), watch:
      return hooks.train(built, keys, plan.hyperparameters(grid.point)).metrics
  finally:
    timing.train_seconds, timing.checkpoint_seconds = watch.seconds, hooks.checkpoint_seconds


def train_grids(plan: SweepPlan, workdir: str, log: RunLog, budget: Optional[Budget] = None,
                on_grid=lambda grid, timing: None) -> dict:
  """Train every grid of ``plan`` in ``plan.training_order``, the programs of the grids after
  the one training compiled in background threads (``BUILT_AHEAD``; ``compile_threads`` at once,
  started in training order): an error of such a compile is raised here, when its grid's turn
  comes. A grid whose checkpoints hold its last
  evaluation is not compiled: its metrics are read back and logged (``RunHooks.finished``).

  Args:
    plan: the sweep's plan.
    workdir: the sweep's workdir.
    log: the sweep's log.
    budget: the call's budget; None: no limit.
    on_grid: ``(SweepGrid, GridTiming) -> None``, called after each grid has trained.

  Returns:
    ``{grid key: metrics {name: [evaluations, models]}}``, in the order of ``plan.grids``.
  """
  results = {}
  to_build = [grid for grid in plan.training_order if not last_chunk_saved(plan, grid, workdir)]
  ahead = len(to_build) if BUILT_AHEAD is None else BUILT_AHEAD
  builds = {}
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=compile_threads(),
                                               thread_name_prefix="normattn-compile")

  def build_through(last: int) -> None:  # the builds start in the order submitted
    for grid in to_build[len(builds):last + 1]:
      builds[grid.key] = pool.submit(build_point, plan, grid)

  def built_grid(grid: SweepGrid) -> tuple[Grid, GridTiming]:
    if grid not in to_build or not ahead:  # in its turn, or a finished grid read back in vain
      return build_point(plan, grid)
    position = to_build.index(grid)
    build_through(position)
    built = builds[grid.key].result()
    builds[grid.key] = None  # the grid is held by this turn alone
    build_through(position + ahead)
    return built
  try:
    if ahead:  # compiling while the finished grids are read back
      build_through(ahead - 1)
    for grid in plan.training_order:
      if grid not in to_build:
        with grid_hooks(plan, grid, workdir, log, budget) as hooks:
          results[grid.key] = hooks.finished()
        if results[grid.key] is not None:
          on_grid(grid, GridTiming())
          continue
      with Stopwatch() as waited:
        built, timing = built_grid(grid)
      timing.waited_seconds = waited.seconds
      results[grid.key] = train_point(plan, grid, workdir, log, budget, built, timing)
      on_grid(grid, timing)
  finally:  # a stopped run does not wait for the builds still to come
    pool.shutdown(wait=False, cancel_futures=True)
  return {grid.key: results[grid.key] for grid in plan.grids}


def resummarise(workdir: str) -> dict:
  """Score a finished run again from its ``config.json`` and ``metrics.npz``, no training:
  rewrites ``summary.json`` (after a change in how results are scored; the caller redraws the
  figures).

  Args:
    workdir: a finished sweep's workdir; one stored under the field name ``sweep.values`` reads
      as ``sweep.grid``.

  Returns:
    The new summary.
  """
  plan = SweepPlan.of(artifacts.read_config(workdir))
  summary = summarise(plan, artifacts.read_results(workdir, plan))
  artifacts.write_summary(workdir, summary)
  return summary


def load_model(workdir: str, arch: str, learning_rate: float, seed: int = 0,
               value: Optional[float] = None):
  """One trained model of a finished sweep, as a plain Flax module and its variables.

  Args:
    workdir: the sweep's workdir (its ``config.json`` and final checkpoints).
    arch: one of the sweep's ``archs``.
    learning_rate: one of its ``learning_rates``.
    seed: the seed's index, in ``[0, num_seeds)``.
    value: the swept value (``sweep.grid``), for a sweep that has one; else None.

  Returns:
    ``(module, variables)``: the ``SequenceModel`` and ``{"params": ...}`` after the last
    training step, so that ``module.apply(variables, tokens)`` runs it.

  Raises:
    ValueError: naming the choices, for an arch, learning rate, seed or value the sweep does not
      hold, or a run that has not finished.
  """
  plan = SweepPlan.of(artifacts.read_config(workdir))
  if not 0 <= seed < plan.axis.num_seeds:
    raise ValueError(f"seed={seed!r}: the sweep trained seeds 0..{plan.axis.num_seeds - 1}")
  module, seeds = load_models(workdir, arch, learning_rate, value)
  return module, seeds[seed]


def load_models(workdir: str, arch: str, learning_rate: float, value: Optional[float] = None):
  """Every seed's trained model of one cell of a finished sweep, restored at once (what the
  report card analyses: its evaluation sweep's seeds at the selected learning rate).

  Args:
    workdir: the sweep's workdir (its ``config.json`` and final checkpoints).
    arch: one of the sweep's ``archs``.
    learning_rate: one of its ``learning_rates``.
    value: the swept value (``sweep.grid``), for a sweep that has one; else None.

  Returns:
    ``(module, [variables per seed])``: the ``SequenceModel`` and, per seed index, its
    ``{"params": ...}`` after the last training step.

  Raises:
    ValueError: naming the choices, for an arch, learning rate or value the sweep does not hold,
      or a run that has not finished.
  """
  plan = SweepPlan.of(artifacts.read_config(workdir))
  if arch not in plan.archs:
    raise ValueError(f"arch={arch!r}: the sweep trained {plan.archs}")
  grid = tuple(plan.config.sweep.grid)  # as the config gives them, for the errors
  if (value is None) != (not grid):
    raise ValueError(f"value={value!r}: the sweep's values are {grid or 'none'}")
  point, value_row = plan.locate(None if value is None else _index_of(grid, value, "value"))
  point_config, axis = plan.point_config(point), plan.axis
  lr_index = _index_of(axis.learning_rates, learning_rate, "learning_rate")
  folder = checkpoint_folder(workdir, plan.grid(arch, point))
  done, state = restore_newest_state(folder)
  if done != num_evaluations(point_config):
    raise ValueError(f"{folder}: its newest checkpoint is evaluation {done}, not the last; "
                     f"finish the sweep first")
  seeds = [jax.tree.map(lambda x, row=row: x[row], state["params"])
           for row in axis.rows(lr_index, value_row)]
  return Setup(arch, point_config).model(), seeds


def _index_of(choices, value, field: str) -> int:
  """The index of ``value`` among ``choices`` (numbers, matched to float rounding)."""
  matches = np.flatnonzero(np.isclose(np.asarray(choices, float), float(value), rtol=1e-6,
                                      atol=0))
  if len(matches) != 1:
    raise ValueError(f"{field}={value!r}: the sweep's are {tuple(choices)}")
  return int(matches[0])


def train_sweep(config: ml_collections.ConfigDict, context: RunContext) -> dict:
  """The sweep kind's ``train``: every (point, arch) grid in turn, each resumed from its
  checkpoints and paid from the one budget.

  Returns:
    ``{grid key: metrics {name: [evaluations, models]}}``, what ``scoring.summarise`` scores.
  """
  plan = SweepPlan.of(config)
  started = time.perf_counter()
  timings = {}

  def on_grid(grid, timing):
    timings[grid.name] = timing.as_json()
    if multihost.is_chief():
      write_json(context.path(TIMING), {"grids": timings}, indent=2)
      context.log(timing.line(grid.name))
  with RunLog(context.workdir, total=plan.total_model_steps, unit="model-step",
              tensorboard=context.tensorboard, progress=context.show_progress) as log:
    results = train_grids(plan, context.workdir, log, context.budget, on_grid)
  if multihost.is_chief():  # on several hosts, one says so
    context.log(f"trained {len(plan.grids)} grid(s) in {time.perf_counter() - started:.0f} s; "
                f"results in {context.workdir}")
  return results


def save_results(workdir: str, config: ml_collections.ConfigDict, results: dict) -> None:
  """The sweep kind's ``save``: ``metrics.npz``, every metric of every grid."""
  artifacts.save_metrics(os.path.join(workdir, artifacts.METRICS), SweepPlan.of(config), results)


def describe(summary: dict) -> list[str]:
  """What the command line prints of a finished sweep: each arch's best, and its figures."""
  return best_lines(summary) + ["figures: accuracy.png (and case_accuracy.png, "
                                "learning_curves.png) in the workdir"]


SWEEP = kinds.register(kinds.RunKind(
    name="sweep",
    # its summary is the best over the evaluations: train.eval_every changes the results
    may_differ={"train.checkpoint_every", "train.checkpoint_minutes"},
    base_config=config_lib.base_config,
    validate=config_lib.validate,
    workdir_config=config_lib.with_compute_dtype,  # "auto" recorded as the dtype it ran in
    train=train_sweep,
    summarise=lambda config, results: summarise(SweepPlan.of(config), results),
    save=save_results,
    describe=describe,
    summary_format={"indent": 2, "sort_keys": True},
    renamed={"sweep.values": "sweep.grid"},
    added={"model.output_gate": None, "model.qk_norm": None, "model.differential": False,
           "model.dtype": "float32", "model.attention_implementation": "auto",
           "train.data_shards": 1, "model.ffn_implementation": "xla",
           "eval.validation_case_sets": True, "train.checkpoint_minutes": 0.0,
           "train.flat_adam": False, "train.drop_zero_l2": False},
    migrate=migrate_sweep))


def run_sweep(config: ml_collections.ConfigDict, workdir: str, *, budget: Optional[Budget] = None,
              show_progress: bool = True, tensorboard: bool = True, afresh: bool = False) -> dict:
  """``runs.run`` of a sweep config: validate, train every (point, arch) grid, write the
  results; returns the summary. The workdir resumes a run of this config, or returns a finished
  one's summary untouched; another config's is refused (``WorkdirError``) unless ``afresh`` moves
  it aside (``open_workdir``).

  Args:
    config: the sweep config (``config.kind`` "sweep").
    workdir: where config.json, checkpoints, history.jsonl, TensorBoard scalars, metrics.npz
      and summary.json go (the figures: ``reporting.figures.draw_finished_sweep``).
    budget: the evaluations and/or minutes this call may run before ``Interrupted``, its
      checkpoint written (``Budget``); the next call resumes. None runs to the end.
    show_progress: show a progress bar (in model-steps).
    tensorboard: write TensorBoard scalars besides history.jsonl.
    afresh: move a workdir of another config aside instead of refusing it.

  Returns:
    The summary (``scoring.summarise``).
  """
  kinds.check_kind(config, SWEEP.name)
  return runs.run(config, workdir, afresh=afresh, budget=budget, show_progress=show_progress,
                  tensorboard=tensorboard)
