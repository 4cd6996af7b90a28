"""How fast this machine compiles and runs in this hour: a fixed piece of the test suite's kind
of work, timed, to quote beside a suite time. The same machine's suite took from 7.5 to 9.5
minutes over one day; the probe tells a slow hour from a slower suite.

  python benchmarks/machine_probe.py            # 3 rounds, each in a fresh process
  python benchmarks/machine_probe.py --rounds 5

Each round starts a new Python process that compiles as ``make test`` does (the quick-compile
flags, no persistent cache) and builds the grids of a tiny sweep (three archs of the mode task
and one of the case task: ``init`` and ``chunk`` compiled, then one chunk run), then the
process's first programs compiled op by op (a model's ``init`` outside ``jit``). It prints each
round's seconds and their median, with the CPU's name. Run it alone on the machine, right before
and right after the suite: a suite time is comparable to another one taken at a probe within a
few percent of its own.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from normattn_jax._extras import cpu_cores, cpu_description

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ROUND = "round"  # the argument that makes this file run one round


def tiny_config(task: str):
  """Two learning rates x two seeds, one block of d = 8 at sequence length 8, validated."""
  from normattn_jax.sweep import base_config, validate
  c = base_config()
  c.task.update(name=task, seq_len=8)
  if task == "mode_finding":
    c.task.update(vocab_size=4, output="classes")
  c.learning_rates, c.num_seeds = (0.001, 0.0003), 2
  c.model.update(d_model=8, num_heads=2, num_layers=1)
  c.train.update(num_steps=10, eval_every=10, batch_size=4)
  c.eval.update(val_batches=2, case_set_size=4)
  validate(c)
  return c


def one_round() -> float:
  """Seconds to build and run the probe's grids and an ``init`` op by op, in this process."""
  from normattn_jax.cli.command import quick_compile
  quick_compile()
  import jax
  import numpy as np
  from normattn_jax.models.sequence import SequenceModel
  from normattn_jax.sweep.layout import ModelsAxis
  from normattn_jax.sweep.programs import Setup, build_grid
  from normattn_jax.train.grid import model_keys

  start = time.perf_counter()
  for arch, task in (("nap", "mode_finding"), ("sum", "mode_finding"), ("bert", "mode_finding"),
                     ("mte", "case_distinction")):
    c = tiny_config(task)
    axis = ModelsAxis.of(c)
    grid = build_grid(Setup(arch, c), axis.num_models)
    hp = grid.shard(axis.hyperparameters())
    state = grid.init(grid.shard(model_keys(c.seed, axis.seed_indices())), hp, *grid.shared)
    jax.block_until_ready(grid.chunk(state, hp))
  model = SequenceModel(vocab_size=10, max_len=8, d_model=16, num_layers=2, num_heads=2,
                        arch="mte", output="classes", num_classes=3)
  jax.block_until_ready(model.init(jax.random.key(0), np.zeros((2, 8), np.int32)))
  return time.perf_counter() - start


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args()
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_COMPILATION_CACHE="false",
             PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
  seconds = []
  for i in range(args.rounds):
    done = subprocess.run([sys.executable, __file__, ROUND], env=env, cwd=REPO,
                          capture_output=True, text=True, check=True)
    seconds.append(float(done.stdout.split()[-1]))
    print(f"round {i + 1}: {seconds[-1]:.2f} s", flush=True)
  print(f"probe: median {statistics.median(seconds):.2f} s of {args.rounds} rounds "
        f"({min(seconds):.2f}-{max(seconds):.2f}); {cpu_description()[0]}, {cpu_cores()} cores, "
        f"float32, quick compile")


if __name__ == "__main__":
  if sys.argv[1:] == [ROUND]:
    print(f"{one_round():.3f}")
  else:
    main()
