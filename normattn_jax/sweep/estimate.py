"""What a sweep costs before it runs: per grid and in all, its model-steps, FLOPs and bytes (XLA's
cost analysis of one model's compiled training step), the programs it compiles and a projected
wall time on the device at hand, from a short calibration of real chunks. Nothing is trained
and no workdir is written.

The calibration times, per architecture, the grid of that arch with the fewest FLOPs per
model-step: the two halves of its real chunk program (the config's shapes, evaluation sets and
batch) over its models axis, a few training steps (``lax.scan``) and the evaluation, each
compiled (its first call less a warm one; the chunk's compile is theirs and the init's) and
timed warm. On a CPU it runs one model per device (the models of a CPU grid run one after
another, width 1, so a model-step takes as long in a grid of any size), on an accelerator the
grid's own models axis.
Each grid's time is then

  compile + model-steps x seconds per model-step + evaluations x seconds per evaluation,

each term the calibrated grid's of its arch, scaled by the grid's FLOPs per model-step over the
calibrated grid's (the compile by the one-step program's compile time over the calibrated
grid's): exact for the calibrated grids, a projection for the others that holds where time
follows FLOPs (larger d, N, batch), not where a step is latency-bound. Checkpoints are not
counted. The sweep's time is its grids' training and evaluations plus the compiles the devices
wait for (``compile_waits``: the grids train in ``SweepPlan.training_order``, each compiled in
the background while the grids before it train, as ``sweep.train`` runs them). A projection
from measured rates (``rates``: model-steps/s measured elsewhere at known FLOPs per model-step)
replaces the calibration, training time alone (``reproject`` adds the compiles given one
grid's compile seconds).
"""
from __future__ import annotations

import dataclasses
import re
import statistics
import time
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep.plan import SweepGrid, SweepPlan
from normattn_jax.sweep.programs import (ACCELERATOR_COMPILE_THREADS, Setup, build_grid,
                                         compile_threads, make_programs)
from normattn_jax.train.grid import DATA_AXIS, model_keys

# HLO operations that launch no work of their own: they name, pack or reinterpret buffers.
FREE = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                  "after-all", "partition-id", "replica-id"})
# Operations that run other computations as control flow, whose instructions are the kernels.
CONTROL = frozenset({"while", "call", "conditional"})


def compiled_step(setup: Setup):
  """One model's training step (``make_programs``' ``train_step``: data drawn on the device,
  forward, backward, Adam), jitted and compiled for the default device, one step unrolled (XLA
  counts a loop's body once)."""
  programs = make_programs(setup)
  hp = {"learning_rate": jnp.float32(1e-3), "l2": jnp.float32(0.0),
        "dropout": jnp.float32(setup.config.train.dropout)}
  key = np.asarray(jax.random.key_data(jax.random.key(0)))
  state = jax.eval_shape(programs.init, key, hp)
  return jax.jit(lambda s, h: programs.train_step(s, h)[0]).lower(state, hp).compile()


def computations(hlo: str) -> dict:
  """HLO text -> {computation name: its instruction lines}, and the entry's name under None."""
  found, current = {}, None
  for line in hlo.splitlines():
    header = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
    if header:
      current = found.setdefault(header.group(2), [])
      if header.group(1):
        found[None] = header.group(2)
    elif current is not None and " = " in line:
      current.append(line)
  return found


def kernels(hlo: str) -> int:
  """The operations a compiled program launches: every instruction of the entry computation
  and of the loops, calls and branches it runs (each counted once), save those that only name
  or reinterpret buffers (``FREE``); a fusion is one kernel, whatever it holds."""
  comps = computations(hlo)
  seen, count = set(), 0

  def walk(name):
    nonlocal count
    if name in seen or name not in comps:
      return
    seen.add(name)
    for line in comps[name]:
      opcode = re.search(r" = (?:\([^=]*\)|\S+) ([\w\-]+)\(", line)
      if opcode is None or opcode.group(1) in FREE:
        continue
      if opcode.group(1) in CONTROL:
        for called in re.findall(r"(?:body|condition|to_apply|branch_computations|"
                                 r"true_computation|false_computation)=\{?%?([\w.\-]+)", line):
          walk(called)
        for group in re.findall(r"branch_computations=\{([^}]*)\}", line):
          for called in re.findall(r"%?([\w.\-]+)", group):
            walk(called)
        continue
      count += 1
  walk(comps.get(None))
  return count


@dataclasses.dataclass(frozen=True)
class StepCost:
  """XLA's figures of one model's compiled training step, and how long it took to compile."""
  gflop: float
  mb: float
  kernels: int
  compile_s: float


def step_cost(setup: Setup) -> StepCost:
  """XLA's cost analysis of one model's compiled training step (``compiled_step``)."""
  start = time.perf_counter()
  compiled = compiled_step(setup)
  compile_s = time.perf_counter() - start
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return StepCost(float(cost["flops"]) / 1e9, float(cost["bytes accessed"]) / 1e6,
                  kernels(compiled.as_text()), compile_s)


@dataclasses.dataclass(frozen=True)
class Calibration:
  """What a few timed chunks of one grid measured, per model of the grid's models axis.

  Attributes:
    compile_s: the grid's init program's compile and its chunk's (the training steps' and the
      evaluation's, each its first call less a warm one).
    step_s: seconds per model-step (the timed training steps over their model-steps).
    evaluation_s: seconds of one evaluation of the whole grid.
    models: the models the calibration ran (one per device on a CPU; the grid's elsewhere).
    steps: the training steps of each timed chunk.
  """
  compile_s: float
  step_s: float
  evaluation_s: float
  models: int
  steps: int


def _timed(fn):
  start = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - start, out


def calibration_models(grid_models: int) -> int:
  """The models a calibration runs: one per device on a CPU (where the models of a grid run one
  after another, so a model-step's time does not depend on their number), the grid's own on an
  accelerator (whose vmaps' width sets its speed)."""
  if jax.default_backend() == "cpu":
    return min(grid_models, jax.device_count())
  return grid_models


def calibrate(setup: Setup, grid_models: int, steps: int = 2, repeats: int = 2) -> Calibration:
  """Time a few chunks of ``setup``'s grid, its shapes as configured, ``steps`` training steps
  per chunk.

  Args:
    setup: the grid's arch and point config.
    grid_models: the models of the real grid (the calibration runs ``calibration_models``).
    steps: training steps per timed chunk.
    repeats: warm chunks (and evaluations) timed; their medians count.

  Returns:
    The ``Calibration``.
  """
  return calibrated_grid(setup, grid_models, steps, repeats)[0]


def calibrated_grid(setup: Setup, grid_models: int, steps: int = 2, repeats: int = 2):
  """``calibrate``, and the trained states of the calibration's grid (for timing a checkpoint
  of them).

  Returns:
    ``(Calibration, states)``.
  """
  c = ml_collections.ConfigDict(setup.config.to_dict())
  c.train.eval_every, c.train.num_steps = steps, steps * (repeats + 1)
  cal = Setup(setup.arch, c, setup.attention)
  models = calibration_models(grid_models)
  grid = build_grid(cal, models, ahead=False)  # its parts compiled and timed below
  programs = make_programs(cal, grid.mesh.shape[DATA_AXIS])
  keys = model_keys(c.seed, np.zeros(models, int))
  hp = grid.shard({"learning_rate": np.full(models, 1e-3, np.float32),
                   "l2": np.full(models, c.train.l2, np.float32),
                   "dropout": np.full(models, c.train.dropout, np.float32)})
  first_init, state = _timed(lambda: grid.init(grid.shard(keys), hp, *grid.shared))
  warm_init, _ = _timed(lambda: grid.init(grid.shard(keys), hp, *grid.shared))

  def train(s, h, *shared):
    return jax.lax.scan(lambda st, _: programs.train_step(st, h), s, None, length=steps)[0]

  train_s, train_compile, state = _warm_median(grid.program(train), state, hp, repeats)
  evaluation = grid.program(lambda s, h, *shared: programs.evaluate(s, shared[0]))
  evaluation_s, evaluation_compile, _ = _warm_median(evaluation, state, hp, repeats)
  # the chunk program holds the training steps and the evaluation: its compile, their two
  compile_s = max(first_init - warm_init, 0.0) + train_compile + evaluation_compile
  return (Calibration(compile_s, train_s / (steps * models), evaluation_s * grid_models / models,
                      models, steps), state)


def _warm_median(program, state, hp, repeats: int):
  """(median seconds of ``repeats`` warm calls, the first call's seconds beyond that, the first
  call's output) of ``program(state, hp)``."""
  first, out = _timed(lambda: program(state, hp))
  warm = statistics.median(_timed(lambda: program(state, hp))[0] for _ in range(repeats))
  return warm, max(first - warm, 0.0), out


@dataclasses.dataclass(frozen=True)
class GridEstimate:
  """One grid's figures and projected seconds.

  Attributes:
    name: the grid's name (``layout.grid_name``).
    arch: its architecture.
    models: its models axis.
    steps: training steps per model.
    evaluations: evaluations of the grid.
    cost: one model-step's ``StepCost``.
    compile_s, train_s, evaluation_s: the projected seconds of each part (None: not projected,
      a projection from rates gives training alone).
    calibrated: whether this grid's own chunks were timed.
  """
  name: str
  arch: str
  models: int
  steps: int
  evaluations: int
  cost: StepCost
  compile_s: Optional[float]
  train_s: float
  evaluation_s: Optional[float]
  calibrated: bool

  @property
  def model_steps(self) -> int:
    return self.models * self.steps

  @property
  def gflop(self) -> float:
    """Training GFLOP: model-steps x one model-step's."""
    return self.model_steps * self.cost.gflop

  @property
  def gb(self) -> float:
    """Training GB accessed: model-steps x one model-step's."""
    return self.model_steps * self.cost.mb / 1e3

  @property
  def seconds(self) -> float:
    """The projected wall time: compile, training and evaluations (what was projected)."""
    return sum(part for part in (self.compile_s, self.train_s, self.evaluation_s)
               if part is not None)


def _cheapest(grids: Sequence[SweepGrid], costs: dict) -> dict:
  """arch -> its grid of the fewest FLOPs per model-step: the one calibration times."""
  chosen = {}
  for grid in grids:
    best = chosen.get(grid.arch)
    if best is None or costs[grid.key].gflop < costs[best.key].gflop:
      chosen[grid.arch] = grid
  return chosen


def rate_at(rates: Sequence[tuple[float, float]], gflop: float) -> float:
  """Model-steps/s at ``gflop`` per model-step from rates measured at other costs: ``rates`` are
  ``(GFLOP per model-step, model-steps/s)``; between two the rate is interpolated log-log, above
  the costliest it falls in proportion to the FLOPs (a step bound by its arithmetic), below the
  cheapest it stays at that one's (a step bound by latency goes no faster).

  Raises:
    ValueError: for no rates, or a rate or cost that is not positive.
  """
  points = sorted((float(g), float(r)) for g, r in rates)
  if not points or any(g <= 0 or r <= 0 for g, r in points):
    raise ValueError(f"rates must be (GFLOP per model-step, model-steps/s) pairs, both > 0, "
                     f"got {rates!r}")
  if gflop <= points[0][0]:
    return points[0][1]
  if gflop >= points[-1][0]:
    return points[-1][1] * points[-1][0] / gflop
  for (g0, r0), (g1, r1) in zip(points, points[1:]):
    if g0 <= gflop <= g1:
      share = (np.log(gflop) - np.log(g0)) / (np.log(g1) - np.log(g0))
      return float(np.exp(np.log(r0) + share * (np.log(r1) - np.log(r0))))
  raise AssertionError("unreachable")


def compile_waits(grids: Sequence[tuple[float, float]], ahead: Optional[int] = None,
                  threads: int = 1) -> float:
  """The seconds the devices wait for compiles over a sweep (``sweep.train.train_grids``' schedule):
  the grids, in the order they train, take ``(compile s, training and evaluation s)`` each; each
  grid's compile starts, in that order, once one of ``threads`` compile threads is free and the
  grid ``ahead`` places before it has started training (None: every grid compiled ahead, 0: each
  compiled in its turn). Compiles and trainings are taken not to slow each other, as on an
  accelerator beside a host of enough cores.

  Raises:
    ValueError: for a negative ``ahead`` or ``threads`` below 1.
  """
  ahead = len(grids) if ahead is None else ahead
  if ahead < 0:
    raise ValueError(f"ahead must be None or >= 0, got {ahead!r}")
  if threads < 1:
    raise ValueError(f"threads must be >= 1, got {threads!r}")
  starts, free, ended = [], [0.0] * threads, 0.0  # free: when each thread's last compile ends
  for index, (compile_s, busy_s) in enumerate(grids):
    if not ahead:  # compiled in its turn, once the grid before it has trained
      submitted = ended
    else:  # at the start, or when the grid ``ahead`` places before it started training
      submitted = starts[index - ahead] if index >= ahead else 0.0
    thread = free.index(min(free))
    free[thread] = max(free[thread], submitted) + compile_s
    starts.append(max(free[thread], ended))
    ended = starts[-1] + busy_s
  return ended - sum(busy_s for _, busy_s in grids)


@dataclasses.dataclass(frozen=True)
class SweepEstimate:
  """Every grid's estimate, the calibrations they were projected from, and the device."""
  grids: tuple[GridEstimate, ...]
  calibrations: dict  # arch -> (grid name, Calibration); empty for a projection from rates
  device: str
  # the seconds the devices wait for compiles in the sweep's schedule (``compile_waits``) with
  # ``compile_threads`` at once; None where the compiles were not projected
  compile_waits_s: Optional[float] = None
  compile_threads: int = 1

  @property
  def programs(self) -> int:
    """The training programs the sweep compiles: one per grid (with its init)."""
    return len(self.grids)

  def total(self, field: str) -> float:
    return sum(getattr(grid, field) for grid in self.grids)

  @property
  def seconds(self) -> float:
    """The projected wall time: every grid's training and evaluations and the compiles the
    devices wait for, or, where compiles were not projected, what was."""
    if self.compile_waits_s is None:
      return self.total("seconds")
    return self.total("train_s") + self.total("evaluation_s") + self.compile_waits_s


def estimate(config: ml_collections.ConfigDict, *, steps: int = 2, repeats: int = 2,
             rates: Optional[Sequence[tuple[float, float]]] = None) -> SweepEstimate:
  """Estimate a sweep config without training it or writing anything.

  Args:
    config: a sweep config (validated here).
    steps: training steps per calibration chunk.
    repeats: warm chunks timed per calibrated grid.
    rates: ``(GFLOP per model-step, model-steps/s)`` measured elsewhere; given, nothing is timed
      and each grid's training time is its model-steps at ``rate_at`` its cost.

  Returns:
    The ``SweepEstimate``.
  """
  config_lib.validate(config)
  plan = SweepPlan.of(config)
  setups = {grid.key: Setup(grid.arch, plan.point_config(grid.point), plan.attention[grid.point])
            for grid in plan.grids}
  costs = {key: step_cost(setup) for key, setup in setups.items()}
  calibrations = {}
  if rates is None:
    for arch, grid in _cheapest(plan.grids, costs).items():
      calibrations[arch] = (grid.name, calibrate(setups[grid.key], plan.axis.num_models, steps,
                                                 repeats))
  estimates = []
  for grid in plan.grids:
    point = plan.point_config(grid.point)
    cost, models = costs[grid.key], plan.axis.num_models
    steps_per_model = point.train.num_steps
    evaluations = steps_per_model // point.train.eval_every
    if rates is not None:
      estimates.append(GridEstimate(grid.name, grid.arch, models, steps_per_model, evaluations,
                                    cost, None, models * steps_per_model / rate_at(rates,
                                                                                   cost.gflop),
                                    None, False))
      continue
    name, cal = calibrations[grid.arch]
    base = costs[next(g.key for g in plan.grids if g.name == name)]
    ratio = cost.gflop / base.gflop
    estimates.append(GridEstimate(
        grid.name, grid.arch, models, steps_per_model, evaluations, cost,
        cal.compile_s * cost.compile_s / base.compile_s,
        models * steps_per_model * cal.step_s * ratio, evaluations * cal.evaluation_s * ratio,
        grid.name == name))
  device = f"{jax.devices()[0].device_kind} x {jax.device_count()} ({jax.default_backend()})"
  by_name = {g.name: g for g in estimates}
  threads = compile_threads()
  waits = None if rates is not None else compile_waits(
      [(by_name[g.name].compile_s, by_name[g.name].train_s + by_name[g.name].evaluation_s)
       for g in plan.training_order], threads=threads)
  return SweepEstimate(tuple(estimates), calibrations, device, waits, threads)


def _hours(seconds: Optional[float]) -> str:
  return "-" if seconds is None else f"{seconds / 3600:.3f}"


def report(result: SweepEstimate, dtype: str) -> list[str]:
  """The lines ``normattn-sweep --estimate`` prints: one per grid, the calibrations, a total."""
  lines = [f"device={result.device} dtype={dtype}"]
  for g in result.grids:
    lines.append(
        f"grid={g.name} models={g.models} steps={g.steps} model_steps={g.model_steps} "
        f"gflop_per_model_step={g.cost.gflop:.4f} mb_per_model_step={g.cost.mb:.2f} "
        f"kernels_per_step={g.cost.kernels} gflop={g.gflop:.4g} gb={g.gb:.4g} programs=1 "
        f"compile_h={_hours(g.compile_s)} train_h={_hours(g.train_s)} "
        f"evaluation_h={_hours(g.evaluation_s)} projected_h={_hours(g.seconds)}"
        + (" calibrated" if g.calibrated else ""))
  for arch, (name, cal) in result.calibrations.items():
    lines.append(f"calibration arch={arch} grid={name} models={cal.models} "
                 f"steps_per_chunk={cal.steps} compile_s={cal.compile_s:.2f} "
                 f"ms_per_model_step={cal.step_s * 1e3:.3f} "
                 f"evaluation_s={cal.evaluation_s:.3f}")
  parts = {field: (None if any(getattr(g, field) is None for g in result.grids)
                   else result.total(field)) for field in ("compile_s", "evaluation_s")}
  lines.append(
      f"total grids={len(result.grids)} programs={result.programs} "
      f"model_steps={int(result.total('model_steps'))} flop={result.total('gflop') * 1e9:.4g} "
      f"bytes={result.total('gb') * 1e9:.4g} compile_h={_hours(parts['compile_s'])} "
      f"compile_waited_h={_hours(result.compile_waits_s)} "
      f"compile_threads={result.compile_threads if result.compile_waits_s is not None else '-'} "
      f"train_h={_hours(result.total('train_s'))} "
      f"evaluation_h={_hours(parts['evaluation_s'])} projected_h={_hours(result.seconds)}")
  return lines


def read_grids(lines: Sequence[str]) -> list[tuple[str, int, float]]:
  """``(name, model-steps, GFLOP per model-step)`` of each grid line an earlier ``report``
  printed (other lines skipped), in the plan's order.

  Raises:
    ValueError: if ``lines`` hold no grid.
  """
  grids = []
  for line in lines:
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    if line.startswith("grid=") and "model_steps" in fields:
      grids.append((fields["grid"], int(fields["model_steps"]),
                    float(fields["gflop_per_model_step"])))
  if not grids:
    raise ValueError("no grid lines (grid=... model_steps=... gflop_per_model_step=...) to "
                     "project")
  return grids


def reproject(lines: Sequence[str], rates: Sequence[tuple[float, float]],
              compile_s: Optional[float] = None,
              threads: int = ACCELERATOR_COMPILE_THREADS) -> list[str]:
  """An earlier estimate's grids (its printed ``report`` lines) projected again from measured
  rates, nothing compiled: each grid's model-steps at ``rate_at`` its GFLOP per model-step.

  Args:
    lines: what ``report`` printed (other lines are skipped).
    rates: ``(GFLOP per model-step, model-steps/s)`` pairs.
    compile_s: the seconds one grid compiles in, measured elsewhere; given, the total adds the
      compiles the devices wait for (``compile_waits``, the grids of the most FLOPs first, as
      ``SweepPlan.training_order`` orders them by their work).
    threads: the grids compiled at once, with ``compile_s`` (default the engine's beside an
      accelerator, whose rates these are).

  Returns:
    One line per grid and a total: training time alone, or with ``compile_s`` the compiles
    waited for too.

  Raises:
    ValueError: if ``lines`` hold no grid, or ``compile_s`` is negative.
  """
  if compile_s is not None and not compile_s >= 0:
    raise ValueError(f"compile_s must be >= 0 seconds, got {compile_s!r}")
  out, grids = [], []
  for name, model_steps, gflop in read_grids(lines):
    seconds = model_steps / rate_at(rates, gflop)
    grids.append((model_steps * gflop, model_steps, seconds))
    out.append(f"grid={name} model_steps={model_steps} gflop_per_model_step={gflop:.4f} "
               f"model_steps_per_s={rate_at(rates, gflop):.1f} train_h={_hours(seconds)}")
  train_s = sum(seconds for _, _, seconds in grids)
  total = (f"total grids={len(out)} model_steps={sum(steps for _, steps, _ in grids)} "
           f"train_h={_hours(train_s)}")
  if compile_s is not None:
    in_order = sorted(grids, key=lambda grid: -grid[0])  # the most FLOPs first
    waits = compile_waits([(compile_s, seconds) for _, _, seconds in in_order], threads=threads)
    total += (f" compile_waited_h={_hours(waits)} compile_threads={threads} "
              f"projected_h={_hours(train_s + waits)}")
  return out + [total]
