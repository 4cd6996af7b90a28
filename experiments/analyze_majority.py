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

from absl import app, flags

from normattn_jax.cli import flags as cli

_CONFIG = cli.define_config_flag("configs/layernorm_majority.py",
                                 "A config of the majority run (the paper's by default).")
_RUN = cli.define_run_flags()
_STEPS = flags.DEFINE_integer("steps", None, "Training steps (rounded up to whole evaluation "
                              "intervals; the config's steps field, which it sets); the authors' "
                              "1000 epochs are 14,000.", lower_bound=1)


def main(argv):
  del argv
  config = _CONFIG.value
  if _STEPS.value is not None:
    config.steps = _STEPS.value
  cli.run_kind(config, _RUN, expected="majority")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
