"""Brody et al., Fig. 2/3: the majority task as the paper ran it, LayerNorm before attention with
projection, without it (the paper's scaling to norm sqrt(d)), and without it as the authors' code
computes it (norm 1/sqrt(d)); 10 seeds each, all models one grid of the engine.

  python experiments/analyze_majority.py --workdir results/majority --steps 14000 \
      --max_minutes 70

Writes to --workdir: config.json, versions.json, history.jsonl (test accuracy, losses and query
angle of every model at every evaluation), checkpoints/, majority.json (the summary) and
majority.png. Every field of --config (default configs/layernorm_majority.py, the paper's
settings) can be overridden, e.g. --config.num_seeds=3
--config.variants="('with_projection','without_projection')". A run stopped by --max_minutes
(or killed) resumes when started again with the same settings; --steps may grow between parts.
A workdir of other settings is refused (exit code 2) unless --afresh moves it aside. The library:
normattn_jax/analysis/majority.py.
"""
import functools
import json
import os

from absl import app, flags

from normattn_jax.analysis import majority
from normattn_jax.reporting import analysis_figures
from normattn_jax.train import cli, multihost

_CONFIG = cli.define_config_flag("configs/layernorm_majority.py",
                                 "A config of the majority run (the paper's by default).")
_RUN = cli.define_run_flags()
_STEPS = flags.DEFINE_integer("steps", 14_000, "Training steps (rounded up to whole evaluation "
                              "intervals); the authors' 1000 epochs are 14,000.", lower_bound=1)


def main(argv):
  del argv
  run = functools.partial(majority.run, steps=_STEPS.value, max_minutes=_RUN.max_minutes.value,
                          log=lambda line: print(line, flush=True))
  summary, curves = cli.run_command(run, _CONFIG.value, _RUN)
  if multihost.is_chief():  # on several hosts, one writes the files
    analysis_figures.majority(curves, _CONFIG.value.num_seeds,
                              os.path.join(_RUN.workdir.value, "majority.png"))
  print(json.dumps({k: summary[k] for k in summary if k != "variants"}, indent=1))


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
