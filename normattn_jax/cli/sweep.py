"""Train a sweep: normattn-sweep --config <name> --workdir runs/<name>

Every config field can be overridden, e.g. --config.model.d_model=64
--config.archs="('nap','max')". A killed run resumes from its checkpoints when restarted with
the same command; a workdir of another config is refused (exit code 2) unless --afresh moves it
aside. --distributed joins the processes of a multi-host run (every host runs the same command;
on a TPU pod or under SLURM they are detected, elsewhere give --coordinator_address,
--num_processes and --process_id): the models are sharded over every device of every host.
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.attention.name=<its name> (its options: --config.attention.options.<option>=...).
--max_minutes stops after the evaluation that passes that wall time, its checkpoint written
(exit code 3); the same command resumes (benchmarks/gpu_checks.sh ends a loan's sweeps so).
"""

from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag(None, "A sweep config.")
_RUN = cli.define_run_flags()


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="sweep")


def main():
  """The console script ``normattn-sweep``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
