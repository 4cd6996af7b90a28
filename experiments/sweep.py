"""Train a sweep: python experiments/sweep.py --config configs/<name>.py --workdir runs/<name>

Every config field can be overridden, e.g. --config.model.d_model=64
--config.archs="('nap','max')". A killed run resumes from its checkpoints when restarted with
the same command; a workdir of another config is refused (exit code 2) unless --afresh moves it
aside. --distributed calls jax.distributed.initialize() (multi-host, e.g. a TPU pod).
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.normalization=<its name>.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax.attention.registry import load_plugins
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.scoring import best_lines
from normattn_jax.train.sweep import run_sweep

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results and checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize().")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside (to "
                            "WORKDIR.replaced-<UTC time>) and start anew.")
_PLUGINS = flags.DEFINE_list("plugins", [], "Modules to import first (on PYTHONPATH), e.g. "
                             "ones that register a normalisation.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the progress bar
  load_plugins(_PLUGINS.value)
  if _DISTRIBUTED.value:
    import jax
    jax.distributed.initialize()
  try:
    summary = run_sweep(_CONFIG.value, _WORKDIR.value, afresh=_AFRESH.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
  print("\n".join(best_lines(summary)))
  print(f"figures: {_WORKDIR.value}/accuracy.png (and case_accuracy.png, learning_curves.png)")


if __name__ == "__main__":
  app.run(main)
