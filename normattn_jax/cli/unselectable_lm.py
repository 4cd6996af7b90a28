"""Table 1 of Brody et al.: unselectable keys in a small GPT-2-style LM trained with and without
LayerNorm's scaling before attention (and Appendix D's Table 2, before vs after the LayerNorm).

  normattn-unselectable-lm --workdir results/unselectable_lm

Trains each variant's seeds as one grid of the engine (default: the offline Shakespeare corpus,
reduced steps; --config.data.corpus=wikipedia with a network), counts per layer the keys that no
query can select on held-out windows, and writes summary.json, table1.md and train_loss.png to
--workdir. Every field of the unselectable_lm config (the default --config) can be overridden,
e.g. --config.train.num_steps=3000. A killed run, or one stopped by --max_minutes, resumes from
its checkpoints when restarted with the same command; a workdir of another config is refused
(exit code 2) unless --afresh moves it aside. On a CPU the default device count is the most,
up to one per core, that divides the seeds, so that no device trains a padding copy of a seed.
"""

from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag("unselectable_lm", "The causal-LM run's config.")
_RUN = cli.define_run_flags()


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="causal_lm")


def main():
  """The console script ``normattn-unselectable-lm``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
