"""Fine-tune a pre-trained encoder on a downstream task, every seed and learning rate of the
config in one compiled program:

  normattn-finetune --config finetune_shakespeare_genre \
    --workdir runs/finetune_genre/softmax --config.encoder.path=runs/albert_tiny/softmax

Every config field can be overridden, e.g. --config.learning_rates="(1e-4,3e-4)" or, for the
bundled MiniLM with another attention normalisation, --config.encoder.kind=minilm
--config.encoder.attention.name=hnas. A killed run resumes from its checkpoints when restarted with
the same command; a workdir of another config, or one whose encoder changed since it began, is
refused (exit code 2) unless --afresh moves it aside. --distributed joins the processes of a
multi-host run (every host runs the same command; on a TPU pod or under SLURM they are detected,
elsewhere give --coordinator_address, --num_processes and --process_id): the models are sharded
over every device of every host.
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.encoder.attention.name=<its name>, or a task
(finetune.task.register(TaskLoader(...))) for --config.task.name=<its name>.
"""

from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag(None, "A fine-tuning config (finetune_*).")
_RUN = cli.define_run_flags()


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="finetuning")


def main():
  """The console script ``normattn-finetune``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
