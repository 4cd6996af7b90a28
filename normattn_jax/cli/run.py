"""Run any kind of run: normattn-run --config <name> --workdir runs/<name>

The config's ``kind`` field (``sweep``, ``pretraining``, ``finetuning``, ``causal_lm``, or one a
plugin registers, ``normattn_jax.train.kinds.register``) picks what runs; every kind goes through
the one driver (``normattn_jax.train.runs.run``). Every config field can be overridden, e.g.
--config.model.d_model=64. A killed run resumes from its checkpoints when restarted with the same
command; a workdir of another config is refused (exit code 2) unless --afresh moves it aside.
--max_minutes stops after the chunk that passes that wall time, its checkpoint written (exit code
3); the same command resumes. --distributed joins the processes of a multi-host run (every host
runs the same command; on a TPU pod or under SLURM they are detected, elsewhere give
--coordinator_address, --num_processes and --process_id). --plugins=my_module imports modules
first, e.g. one that registers a normalisation, a task or a kind of run of your own.
"""
from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag(None, "A config (its kind picks the run).")
_RUN = cli.define_run_flags()


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN)


def main():
  """The console script ``normattn-run``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
