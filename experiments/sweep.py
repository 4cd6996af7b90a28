"""Train a sweep: python experiments/sweep.py --config configs/<name>.py --workdir runs/<name>

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
import functools
import sys

from absl import app, flags

from normattn_jax.reporting import figures
from normattn_jax.train import cli, multihost
from normattn_jax.train.driver import Interrupted
from normattn_jax.train.scoring import best_lines
from normattn_jax.train.sweep import run_sweep

_CONFIG = cli.define_config_flag(None, "Path to a configs/*.py file.")
_RUN = cli.define_run_flags()
_MAX_MINUTES = flags.DEFINE_float("max_minutes", 0.0, "Stop after the evaluation that passes "
                                  "this wall time (0: no limit); rerun to resume.",
                                  lower_bound=0.0)


def main(argv):
  del argv
  run = functools.partial(run_sweep, max_minutes=_MAX_MINUTES.value)
  try:
    summary = cli.run_command(run, _CONFIG.value, _RUN)
  except Interrupted as stop:
    print(f"{stop}; rerun the same command to resume", flush=True)
    sys.exit(cli.INTERRUPTED_EXIT)
  if multihost.is_chief():  # on several hosts, one writes the files
    figures.draw_finished_sweep(_RUN.workdir.value)
  print("\n".join(best_lines(summary)))
  print(f"figures: {_RUN.workdir.value}/accuracy.png (and case_accuracy.png, "
        f"learning_curves.png)")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
