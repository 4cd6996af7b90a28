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
import os

from absl import app

from normattn_jax.finetune.train import run_finetuning
from normattn_jax.reporting import training_figures
from normattn_jax.train import cli, multihost

_CONFIG = cli.define_config_flag(None, "Path to a configs/finetune_*.py file.")
_RUN = cli.define_run_flags()


def describe(summary: dict) -> list[str]:
  """One line per learning rate (mean, standard error, min and max over the seeds) and the
  best one."""
  main = summary["metric"]
  lines = [f"{summary['task']} on {summary['encoder']}: dev {main} after {summary['steps']} "
           f"steps, over {summary['num_seeds']} seeds"]
  for cell in summary["cells"]:
    s = cell[main]
    score = ("all diverged" if s["mean"] is None else
             f"{s['mean']:.4f} +- {s['std_error']:.4f} (min {s['min']:.4f}, max {s['max']:.4f})")
    diverged = f", {cell['diverged']} diverged" if cell["diverged"] else ""
    lines.append(f"  lr {cell['learning_rate']:.2e}: {score}{diverged}")
  if summary["best"] is not None:
    lines.append(f"  best: lr {summary['best']['learning_rate']:.2e}")
  return lines


def main(argv):
  del argv
  summary = cli.run_command(run_finetuning, _CONFIG.value, _RUN)
  workdir = _RUN.workdir.value
  if multihost.is_chief():  # on several hosts, one writes the files
    training_figures.finetuning_curves(summary, os.path.join(workdir, "metrics.npz"),
                                       os.path.join(workdir, "curves.png"))
  print("\n".join(describe(summary)))
  print(f"wrote {_RUN.workdir.value}/summary.json, metrics.npz and curves.png")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
