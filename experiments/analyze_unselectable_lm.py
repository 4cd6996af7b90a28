"""Table 1 of Brody et al.: unselectable keys in a small GPT-2-style LM trained with and without
LayerNorm's scaling before attention (and Appendix D's Table 2, before vs after the LayerNorm).

  python experiments/analyze_unselectable_lm.py --workdir results/unselectable_lm

Trains each variant's seeds as one grid of the engine (default: the offline Shakespeare corpus,
reduced steps; --config.data.corpus=wikipedia with a network), counts per layer the keys that no
query can select on held-out windows, and writes summary.json, table1.md and train_loss.png to
--workdir. Every field of configs/unselectable_lm.py (the default --config) can be overridden,
e.g. --config.train.num_steps=3000. A killed run, or one stopped by --max_minutes, resumes from
its checkpoints when restarted with the same command; a workdir of another config is refused
(exit code 2) unless --afresh moves it aside. On a CPU the default device count is the most,
up to one per core, that divides the seeds, so that no device trains a padding copy of a seed.
"""

from absl import app

from normattn_jax.cli import flags as cli

_CONFIG = cli.define_config_flag("configs/unselectable_lm.py", "Path to the run's config file.")
_RUN = cli.define_run_flags()


def main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="causal_lm")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
