"""What keeping the devices busy between chunks and grids saves a sweep: one small multi-grid
sweep (the mode task, d = N = 16, one block, 2 learning rates x 2 seeds per grid, 4 evaluations,
a checkpoint after every second) run end to end (``run_sweep``) the previous way and the new way,
side by side in one process, rounds interleaved, each in a fresh workdir. Its grids are archs
(``--sweep archs``, every grid ``--steps`` long) or, as in Table 5, vocabulary sizes of one arch
with the steps in proportion (``--sweep vocab``: S = 2, 4, 8, ..., the largest ``--steps`` long).

The variants:
- previous: each grid compiled in its turn (``sweep.train.BUILT_AHEAD`` 0), every checkpoint
  waited for until written, each chunk dispatched after the previous one's metrics were read;
- compile_ahead: the next grid compiled in a background thread while one trains, the grids in
  the plan's order;
- longest_first: the grids trained longest first (``SweepPlan.training_order``), every later
  one compiled in the background thread;
- async_checkpoints: checkpoints written in the background, and a chunk whose state no
  checkpoint needs dispatched before the last one's metrics are read;
- all: longest_first and async_checkpoints (the engine's default).
What compiling ahead saves is at most the shorter of a grid's compile and its training, less
what the two take from each other on the same cores: ``--steps`` sets the training. Beside each
run's seconds waiting for builds, ``predicted_waited_s`` is what the schedule's model
(``estimate.compile_waits``, which the estimates' projections use) gives from that run's own
build and training seconds, in the order its grids trained.

First a check that XLA's compile releases the GIL (what compiling ahead in a thread rests on):
the longest stall of a Python loop in the main thread while another thread compiles.

  python benchmarks/grid_overlap.py [--rounds 1] [--grids 2] [--steps 16000] [--sweep archs]
      [--variants previous --variants all]

One line per variant and round, then per variant the median wall seconds and
``<variant>_speedup=<previous' seconds / the variant's>``.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import threading
import time
from unittest import mock

import jax
import jax.numpy as jnp
from absl import app, flags, logging

from normattn_jax.sweep import train as sweep_train
from normattn_jax.sweep.config import base_config
from normattn_jax.sweep.estimate import compile_waits
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.train.checkpoint import GridCheckpoints, read_json
from normattn_jax.train.driver import RunHooks

_ROUNDS = flags.DEFINE_integer("rounds", 1, "Interleaved rounds per variant.", lower_bound=1)
_GRIDS = flags.DEFINE_integer("grids", 2, "Grids of the sweep (archs), 2 to 6.", lower_bound=2,
                              upper_bound=6)
_STEPS = flags.DEFINE_integer("steps", 16000, "Training steps per grid (4 evaluations).",
                              lower_bound=4)
_VARIANTS = flags.DEFINE_multi_enum(
    "variants", ["previous", "all"],
    ["previous", "compile_ahead", "longest_first", "async_checkpoints", "all"],
    "Which paths to run (previous always).")
_SWEEP = flags.DEFINE_enum("sweep", "archs", ["archs", "vocab"],
                           "The grids: archs of equal steps, or vocabulary sizes of one arch "
                           "with the steps in proportion (Table 5's shape).")

ARCHS = ("nap", "mte", "sum", "max", "bert", "albert")
# grids compiled ahead of the one training, per compile path (``sweep.train.BUILT_AHEAD``)
AHEAD = {"previous": 0, "compile_ahead": 1, "longest_first": None}
# what each variant switches on
SWITCHES = {"previous": (), "compile_ahead": ("compile_ahead",),
            "longest_first": ("longest_first",),
            "async_checkpoints": ("async_checkpoints",),
            "all": ("longest_first", "async_checkpoints")}


def sweep_config(grids: int, steps: int, sweep: str = "archs"):
  """``grids`` grids of 2 learning rates x 2 seeds of the mode task at d = N = 16, one block, a
  checkpoint after every second of the 4 evaluations: ``grids`` archs of ``steps`` steps, or
  (``sweep`` "vocab") NAP at vocabulary sizes 2, 4, ..., 2 ** grids, the largest ``steps`` long
  and the others in proportion."""
  c = base_config()
  c.archs = ARCHS[:grids] if sweep == "archs" else ARCHS[:1]
  c.learning_rates, c.num_seeds = (1e-3, 3e-4), 2
  c.task.update(name="mode_finding", vocab_size=4, output="classes", seq_len=16)
  c.model.update(d_model=16, num_heads=2, num_layers=1, dtype="float32")
  c.train.update(num_steps=steps, eval_every=steps // 4, batch_size=8, checkpoint_every=2)
  c.eval.update(val_batches=2, case_set_size=8)
  if sweep == "vocab":
    c.task.vocab_size = 2 ** grids
    c.sweep.update(name="task.vocab_size", grid=tuple(2 ** k for k in range(1, grids + 1)),
                   steps_scale="proportional", steps_reference=2 ** grids)
  return c


def save_and_wait(original):
  """``GridCheckpoints.save`` as it was: returns once the checkpoint is written."""
  def save(self, evals_done, tree):
    original(self, evals_done, tree)
    self.wait()
  return save


@contextlib.contextmanager
def previous_path(switches):
  """The switches not in ``switches`` set back to the previous path."""
  with contextlib.ExitStack() as stack:
    if "longest_first" not in switches:
      stack.enter_context(mock.patch.object(sweep_train, "BUILT_AHEAD",
                                            1 if "compile_ahead" in switches else 0))
      stack.enter_context(mock.patch.object(SweepPlan, "training_order",
                                            property(lambda plan: plan.grids)))
    if "async_checkpoints" not in switches:
      stack.enter_context(mock.patch.object(GridCheckpoints, "save",
                                            save_and_wait(GridCheckpoints.save)))
      stack.enter_context(mock.patch.object(RunHooks, "state_needed", lambda self, done: True))
    yield


def run_variant(name: str, config, root: str, index: int) -> dict:
  """One sweep run the ``name`` way in a fresh workdir; its seconds and timing.json sums."""
  workdir = os.path.join(root, f"{name}_{index}")
  with previous_path(SWITCHES[name]):
    started = time.perf_counter()
    sweep_train.run_sweep(config, workdir, show_progress=False, tensorboard=False)
    seconds = time.perf_counter() - started
  grids = list(read_json(os.path.join(workdir, sweep_train.TIMING))["grids"].values())
  total = lambda key: sum(grid[key] for grid in grids)
  path = next((p for p in ("longest_first", "compile_ahead") if p in SWITCHES[name]), "previous")
  # the schedule's model, fed this run's own builds and trainings in the order they ran
  predicted = compile_waits([(g["build_seconds"], g["train_seconds"]) for g in grids],
                            AHEAD[path])
  return {"seconds": seconds, "compiles": total("compiles"), "waited": total("waited_seconds"),
          "checkpoints": total("checkpoint_seconds"), "train": total("train_seconds"),
          "predicted": predicted}


def compile_stall_ms() -> tuple[float, float]:
  """(compile seconds, the longest stall in ms of the main thread's Python loop meanwhile)."""
  def program(x):
    for i in range(40):
      x = jnp.tanh(x @ x.T + i) * 0.5
    return x.sum()
  lowered = jax.jit(program).lower(jax.ShapeDtypeStruct((64, 64), jnp.float32))
  took = {}

  def compile_():
    started = time.perf_counter()
    lowered.compile()
    took["seconds"] = time.perf_counter() - started
  thread = threading.Thread(target=compile_)
  stall, last = 0.0, time.perf_counter()
  thread.start()
  while thread.is_alive():
    now = time.perf_counter()
    stall, last = max(stall, now - last), now
  thread.join()
  return took["seconds"], 1000 * stall


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs each save at INFO
  seconds, stall = compile_stall_ms()
  print(f"gil: a {seconds:.2f} s compile in a thread stalled the main thread at most "
        f"{stall:.1f} ms", flush=True)
  shortest = 2 ** (_GRIDS.value - 1) if _SWEEP.value == "vocab" else 1
  if _STEPS.value % (4 * shortest):
    raise app.UsageError(f"--steps={_STEPS.value}: the shortest grid trains --steps / "
                         f"{shortest} steps in 4 evaluations, so --steps must be a multiple "
                         f"of {4 * shortest}")
  config = sweep_config(_GRIDS.value, _STEPS.value, _SWEEP.value)
  variants = list(dict.fromkeys(["previous"] + list(_VARIANTS.value)))
  runs = {name: [] for name in variants}
  with tempfile.TemporaryDirectory() as root:
    for index in range(_ROUNDS.value):
      for name in (variants if index % 2 == 0 else variants[::-1]):
        row = run_variant(name, config, root, index)
        runs[name].append(row)
        print(f"round={index} variant={name} seconds={row['seconds']:.1f} "
              f"compiles={row['compiles']} waited_for_builds_s={row['waited']:.1f} "
              f"predicted_waited_s={row['predicted']:.1f} "
              f"train_s={row['train']:.1f} checkpoint_s={row['checkpoints']:.1f}", flush=True)
  median = {name: statistics.median(r["seconds"] for r in rows) for name, rows in runs.items()}
  for name in variants:
    print(f"{name}: median {median[name]:.1f} s over {len(runs[name])} round(s)")
  print(" ".join(f"{name}_speedup={median['previous'] / median[name]:.2f}"
                 for name in variants if name != "previous"))


if __name__ == "__main__":
  app.run(main)
