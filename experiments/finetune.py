"""Fine-tune a pre-trained encoder on a downstream task, every seed and learning rate of the
config in one compiled program:

  python experiments/finetune.py --config configs/finetune_shakespeare_genre.py \
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

from normattn_jax.cli import flags as cli

_CONFIG = cli.define_config_flag(None, "Path to a configs/finetune_*.py file.")
_RUN = cli.define_run_flags()


def main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="finetuning")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
