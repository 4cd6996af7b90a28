"""Brody et al., Fig. 2/3: the majority task as the paper ran it, LayerNorm before attention with
projection, without it (the paper's scaling to norm sqrt(d)), and without it as the authors' code
computes it (norm 1/sqrt(d)); 10 seeds each, all models one grid of the engine.

  python experiments/analyze_majority.py --workdir results/majority --steps 14000 \
      --max_minutes 70

Writes to --workdir: config.json, versions.json, history.jsonl (test accuracy, losses and query
angle of every model at every evaluation), checkpoints/, majority.json (the summary) and
majority.png. Every setting of ``normattn_jax.analysis.majority.MajorityConfig`` (the paper's by
default) can be overridden, e.g. --config.num_seeds=3
--config.variants="('with_projection','without_projection')". A run stopped by --max_minutes
(or killed) resumes when started again with the same settings; --steps may grow between parts.
A workdir of other settings is refused (exit code 2) unless --afresh moves it aside. The library:
normattn_jax/analysis/majority.py.
"""
import json
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax.analysis import majority
from normattn_jax.reporting import analysis_figures
from normattn_jax.train import cli
from normattn_jax.train.checkpoint import WorkdirError

_CONFIG = config_flags.DEFINE_config_dict("config", majority.default_config(),
                                          "The run's settings (the paper's).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", "results/majority", "Directory for the results.")
_STEPS = flags.DEFINE_integer("steps", 14_000, "Training steps (rounded up to whole evaluation "
                              "intervals); the authors' 1000 epochs are 14,000.", lower_bound=1)
_MAX_MINUTES = flags.DEFINE_float("max_minutes", 0.0, "Stop after the evaluation interval that "
                                  "passes this wall time (0: no limit); rerun to resume.",
                                  lower_bound=0.0)
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside and start anew.")
_CPU_DEVICES = cli.define_cpu_devices_flag()


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the log
  cli.split_cpu(_CPU_DEVICES.value)  # one device per core, before JAX starts
  cli.enable_compilation_cache()
  try:
    majority.from_config(_CONFIG.value)  # refused before anything is written
  except ValueError as err:
    raise app.UsageError(str(err)) from None
  workdir = _WORKDIR.value
  try:
    summary, curves = majority.run(_CONFIG.value, workdir, steps=_STEPS.value,
                                   max_minutes=_MAX_MINUTES.value, afresh=_AFRESH.value,
                                   log=lambda line: print(line, flush=True))
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(cli.WORKDIR_ERROR_EXIT)
  analysis_figures.majority(curves, _CONFIG.value.num_seeds,
                            os.path.join(workdir, "majority.png"))
  print(json.dumps({k: summary[k] for k in summary if k != "variants"}, indent=1))


if __name__ == "__main__":
  app.run(main)
