"""Brody et al., Fig. 2/3: the majority task as the paper ran it, LayerNorm before attention with
projection, without it (the paper's scaling to norm sqrt(d)), and without it as the authors' code
computes it (norm 1/sqrt(d)); 10 seeds each, all models one grid of the engine.

  normattn-majority --workdir results/majority --steps 14000 \
      --max_minutes 70

Writes to --workdir: config.json, versions.json, history.jsonl (test accuracy, losses and query
angle of every model at every evaluation), checkpoints/, majority.json (the summary) and
majority.png. Every field of --config (default layernorm_majority, the paper's settings) can be
overridden, e.g. --config.num_seeds=3
--config.variants="('with_projection','without_projection')". A run stopped by --max_minutes (or
killed) resumes when started again with the same settings; --steps may grow between parts.
A workdir of other settings is refused (exit code 2) unless --afresh moves it aside. The library:
normattn_jax/analysis/majority.py.
"""

from absl import app, flags

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag("layernorm_majority",
                                 "A config of the majority run (the paper's by default).")
_RUN = cli.define_run_flags()
_STEPS = flags.DEFINE_integer("steps", None, "Training steps (rounded up to whole evaluation "
                              "intervals; the config's steps field, which it sets); the authors' "
                              "1000 epochs are 14,000.", lower_bound=1)


def _main(argv):
  del argv
  config = _CONFIG.value
  if _STEPS.value is not None:
    config.steps = _STEPS.value
  cli.run_kind(config, _RUN, expected="majority")


def main():
  """The console script ``normattn-majority``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
