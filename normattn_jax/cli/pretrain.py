"""Pre-train ALBERT with MLM + SOP: normattn-pretrain --config albert_tiny
--workdir runs/albert_tiny

Every config field can be overridden, e.g. --config.model.attention.name=dnas. A killed run resumes
from its newest checkpoint when restarted with the same command; a workdir of another config is
refused (exit code 2) unless --afresh moves it aside. --distributed joins the processes of a
multi-host run (every host runs the same command; on a TPU pod or under SLURM they are detected,
elsewhere give --coordinator_address, --num_processes and --process_id): the batch is sharded
over every device of every host.
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.model.attention.name=<its name>.
"""

from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag("albert_tiny", "An ALBERT pre-training config (albert_*).")
_RUN = cli.define_run_flags()


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="pretraining")


def main():
  """The console script ``normattn-pretrain``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
