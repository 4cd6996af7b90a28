"""Fine-tune a pre-trained encoder on a downstream task, every seed and learning rate of the
config in one compiled program:

  python experiments/finetune.py --config configs/finetune_shakespeare_genre.py \
    --workdir runs/finetune_genre/softmax --config.encoder.path=runs/albert_tiny/softmax

Every config field can be overridden, e.g. --config.learning_rates="(1e-4,3e-4)" or, for the
bundled MiniLM with another attention normalisation, --config.encoder.kind=minilm
--config.encoder.attention=hnas. A killed run resumes from its checkpoints when restarted with
the same command; a workdir of another config is refused (exit code 2) unless --afresh moves it
aside. --distributed calls jax.distributed.initialize() (multi-host); the models are sharded
over all devices. --plugins=my_norms imports modules first, e.g. one that registers a
normalisation of your own for --config.encoder.attention=<its name>.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax.attention.registry import load_plugins
from normattn_jax.finetune.train import run_finetuning
from normattn_jax.train.checkpoint import WorkdirError

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/finetune_*.py file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results and checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize().")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside (to "
                            "WORKDIR.replaced-<UTC time>) and start anew.")
_PLUGINS = flags.DEFINE_list("plugins", [], "Modules to import first (on PYTHONPATH), e.g. "
                             "ones that register a normalisation.")
flags.mark_flags_as_required(["config", "workdir"])


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
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the progress bar
  load_plugins(_PLUGINS.value)
  if _DISTRIBUTED.value:
    import jax
    jax.distributed.initialize()
  try:
    summary = run_finetuning(_CONFIG.value, _WORKDIR.value, afresh=_AFRESH.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
  print("\n".join(describe(summary)))
  print(f"wrote {_WORKDIR.value}/summary.json, metrics.npz and curves.png")


if __name__ == "__main__":
  app.run(main)
