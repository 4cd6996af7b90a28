"""A sweep's estimate (``normattn-sweep --estimate``): its figures add up (model-steps = models x
steps, FLOPs = model-steps x one model-step's), its calibrated grid is the cheapest of its arch,
the others projected from it, and nothing is written."""
import os

import pytest

from normattn_jax.sweep import estimate

from helpers.sweeps import tiny_sweep_config


def two_point_sweep():
  """Two static points on the mode task (no case sets: smaller programs to compile)."""
  return tiny_sweep_config(**{"archs": ("nap",), "sweep.name": "model.d_model",
                              "sweep.grid": (8, 16), "train.num_steps": 20,
                              "train.eval_every": 10, "task.name": "mode_finding",
                              "task.output": "classes", "task.vocab_size": 4})


@pytest.fixture(scope="module")
def estimated(tmp_path_factory):
  folder = tmp_path_factory.mktemp("estimate")
  cwd = os.getcwd()
  os.chdir(folder)
  try:
    return estimate.estimate(two_point_sweep(), steps=1, repeats=1), folder
  finally:
    os.chdir(cwd)


def test_the_figures_add_up_and_nothing_is_written(estimated):
  result, folder = estimated
  assert os.listdir(folder) == []
  assert [g.name for g in result.grids] == ["nap[model.d_model=8]", "nap[model.d_model=16]"]
  for grid in result.grids:
    assert grid.models == 2 * 2 and grid.steps == 20 and grid.evaluations == 2
    assert grid.model_steps == grid.models * grid.steps
    assert grid.gflop == pytest.approx(grid.model_steps * grid.cost.gflop)
    assert grid.seconds == pytest.approx(grid.compile_s + grid.train_s + grid.evaluation_s)
  small, large = result.grids
  assert large.cost.gflop > small.cost.gflop > 0 and small.cost.kernels > 0
  assert (small.calibrated, large.calibrated) == (True, False)
  assert large.train_s == pytest.approx(small.train_s * large.cost.gflop / small.cost.gflop)
  assert result.programs == 2
  assert result.total("model_steps") == 2 * 4 * 20
  assert result.compile_waits_s == pytest.approx(estimate.compile_waits(  # d = 16: more work
      [(g.compile_s, g.train_s + g.evaluation_s) for g in result.grids[::-1]]))
  assert result.seconds == pytest.approx(result.total("train_s") + result.total("evaluation_s")
                                         + result.compile_waits_s)
  assert result.compile_threads == 1  # on a CPU
  total = estimate.report(result, "float32")[-1]
  assert total.startswith("total grids=2 programs=2 model_steps=160 ")
  assert " compile_threads=1 " in total
  assert f"projected_h={result.seconds / 3600:.3f}" in total


def test_the_compiles_waited_for_follow_the_schedule():
  """Grids of (compile s, busy s) in training order: the first compile is always waited for;
  compiled all ahead, a long first grid hides the later compiles, which one ahead or each in its
  turn does not, nor all ahead with the short grid first."""
  long_first = [(10.0, 100.0), (10.0, 1.0), (10.0, 1.0)]
  assert estimate.compile_waits(long_first) == pytest.approx(10.0)
  assert estimate.compile_waits(long_first, ahead=1) == pytest.approx(10.0 + 9.0)
  assert estimate.compile_waits(long_first, ahead=0) == pytest.approx(30.0)
  assert estimate.compile_waits(long_first[::-1]) == pytest.approx(10.0 + 9.0 + 9.0)
  with pytest.raises(ValueError, match="ahead must be"):
    estimate.compile_waits(long_first, ahead=-1)


def test_two_compile_threads_halve_the_waits_where_compiles_outlast_the_training():
  """Four grids of 10 s compiles and 1 s of training: one thread waits 10 s before each, two
  threads compile the grids in pairs (the first pair from the start); compiled one ahead, the
  second thread has nothing to do."""
  short = [(10.0, 1.0)] * 4
  assert estimate.compile_waits(short) == pytest.approx(41.0 - 4.0)
  assert estimate.compile_waits(short, threads=2) == pytest.approx(22.0 - 4.0)
  assert estimate.compile_waits(short, ahead=1, threads=2) == pytest.approx(41.0 - 4.0)
  assert estimate.compile_waits(short, ahead=0, threads=2) == pytest.approx(40.0)
  with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
    estimate.compile_waits(short, threads=0)


def test_a_projection_from_measured_rates_is_training_alone():
  rates = [(0.01, 100.0), (1.0, 10.0)]
  assert estimate.rate_at(rates, 0.001) == 100.0  # below the cheapest: no faster
  assert estimate.rate_at(rates, 0.1) == pytest.approx(31.6227766)  # log-log between
  assert estimate.rate_at(rates, 4.0) == pytest.approx(2.5)  # above: in proportion to FLOPs
  result = estimate.estimate(two_point_sweep(), rates=rates)
  for grid in result.grids:
    assert grid.compile_s is None and grid.evaluation_s is None and not grid.calibrated
    assert grid.seconds == pytest.approx(grid.model_steps / estimate.rate_at(rates,
                                                                             grid.cost.gflop))
  again = estimate.reproject(estimate.report(result, "float32"), rates)  # nothing compiled
  assert again[-1] == (f"total grids=2 model_steps=160 "
                       f"train_h={result.total('seconds') / 3600:.3f}")
  lines = estimate.report(result, "float32")
  waits = estimate.compile_waits([(60.0, g.seconds) for g in result.grids[::-1]],  # d = 16 first
                                 threads=2)  # the engine's beside an accelerator
  assert estimate.reproject(lines, rates, compile_s=60.0)[-1] == (
      f"{again[-1]} compile_waited_h={waits / 3600:.3f} compile_threads=2 "
      f"projected_h={(result.total('seconds') + waits) / 3600:.3f}")
  with pytest.raises(ValueError, match="compile_s must be"):
    estimate.reproject(lines, rates, compile_s=-1.0)
  with pytest.raises(ValueError, match="rates must be"):
    estimate.rate_at([(0.0, 1.0)], 1.0)


COST_PROBE = """
import json
from normattn_jax.sweep.config import base_config, validate
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.programs import Setup
from normattn_jax.sweep import estimate
c = base_config(); c.archs = ("nap",); c.task.seq_len = 8
c.model.update(d_model=8, num_heads=2, num_layers=1); c.train.batch_size = 4
validate(c); plan = SweepPlan.of(c); grid = plan.grids[0]
cost = estimate.step_cost(Setup(grid.arch, plan.point_config(grid.point), plan.attention[()]))
print(json.dumps([cost.gflop, cost.mb, cost.kernels]))
"""


@pytest.mark.slow
def test_a_step_compiled_to_be_analysed_costs_what_the_optimised_step_costs():
  """``COST_ANALYSIS_FLAGS`` (no LLVM passes: --estimate with rates, step_cost.py) leave XLA's
  cost analysis as the optimised compile gives it; the emitter flag of the suite's quick compile
  does not (the check sees a change)."""
  import json
  import subprocess
  import sys

  from normattn_jax.cli import command as cli

  def cost(xla_flags):
    env = dict(os.environ, XLA_FLAGS=" ".join(xla_flags))
    run = subprocess.run([sys.executable, "-c", COST_PROBE], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
  optimised = cost(())
  assert cost(cli.COST_ANALYSIS_FLAGS) == optimised
  assert cost(cli.QUICK_COMPILE_FLAGS) != optimised
