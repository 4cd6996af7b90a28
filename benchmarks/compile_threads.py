"""How many grids a host compiles in the time of one: the grids of a sweep config built
(``sweep.train.build_point``: init and chunk traced, lowered and compiled, as a sweep builds
them) all at once by one compile thread, then by two, rounds interleaved, the persistent
compilation cache off so that every build compiles. A sweep compiles its grids in the background
``programs.compile_threads()`` at once (one on a CPU, whose cores also train;
``ACCELERATOR_COMPILE_THREADS`` beside an accelerator); this measures what a second thread adds
on the host at hand, where nothing else runs. Tracing holds Python's lock and XLA's compile
releases it, so the gain is at most the cores free for a second compile.

  python benchmarks/compile_threads.py [--config fig4_case_lr_x_seq_len] [--grids 4]
      [--rounds 2] [--config.model.d_model=16 ...]

The builds are the last ``--grids`` of the sweep's training order (its cheapest, the ones whose
compiles no training hides). One line per round and thread count (wall seconds, each build's
seconds), then ``two_threads_speedup=<median wall of one thread / of two>`` and the device.
"""
from __future__ import annotations

import concurrent.futures
import statistics
import time

import jax
from absl import app, flags, logging

from normattn_jax._extras import cpu_cores, cpu_description
from normattn_jax.cli import command as cli
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep import train as sweep_train
from normattn_jax.sweep.plan import SweepPlan

_CONFIG = cli.define_config_flag("fig4_case_lr_x_seq_len", "The sweep whose grids are built.")
_GRIDS = flags.DEFINE_integer("grids", 4, "Grids built per round: the last of the training "
                              "order.", lower_bound=2)
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Interleaved rounds per thread count.",
                               lower_bound=1)
THREADS = (1, 2)


def build_all(plan: SweepPlan, grids, threads: int) -> tuple[float, list[float]]:
  """(wall seconds, each grid's build seconds) of building ``grids`` with ``threads`` at once."""
  started = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(threads) as pool:
    builds = [pool.submit(sweep_train.build_point, plan, grid) for grid in grids]
    seconds = [build.result()[1].build_seconds for build in builds]
  return time.perf_counter() - started, seconds


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  cli.split_cpu(None)
  jax.config.update("jax_enable_compilation_cache", False)  # every build compiles
  config = _CONFIG.value
  config_lib.validate(config)
  plan = SweepPlan.of(config)
  grids = plan.training_order[-_GRIDS.value:]
  walls = {threads: [] for threads in THREADS}
  for index in range(_ROUNDS.value):
    for threads in (THREADS if index % 2 == 0 else THREADS[::-1]):
      wall, seconds = build_all(plan, grids, threads)
      walls[threads].append(wall)
      print(f"round={index} threads={threads} grids={len(grids)} wall_s={wall:.1f} "
            f"build_s={','.join(f'{s:.1f}' for s in seconds)}", flush=True)
  device = jax.devices()[0]
  host = f"{cpu_description()[0]}, {cpu_cores()} cores"
  print(f"two_threads_speedup={statistics.median(walls[1]) / statistics.median(walls[2]):.2f} "
        f"device={device.device_kind} ({jax.default_backend()}) host={host!r} "
        f"grids={','.join(grid.name for grid in grids)}")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)  # --config takes a shipped config's name
