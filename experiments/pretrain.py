"""Pre-train ALBERT with MLM + SOP: python experiments/pretrain.py --config configs/albert_tiny.py
--workdir runs/albert_tiny

Every config field can be overridden, e.g. --config.model.attention=dnas. A killed run resumes
from its newest checkpoint when restarted with the same command; a workdir of another config is
refused (exit code 2) unless --afresh moves it aside. --distributed calls
jax.distributed.initialize() (multi-host, e.g. a TPU pod); the batch is sharded over all devices.
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.model.attention=<its name>.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax.attention.registry import load_plugins
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.pretrain import run_pretraining, throughput

_CONFIG = config_flags.DEFINE_config_file("config", "configs/albert_tiny.py",
                                          "Path to a configs/albert_*.py file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results and checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize().")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside (to "
                            "WORKDIR.replaced-<UTC time>) and start anew.")
_PLUGINS = flags.DEFINE_list("plugins", [], "Modules to import first (on PYTHONPATH), e.g. "
                             "ones that register a normalisation.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the progress bar
  load_plugins(_PLUGINS.value)
  if _DISTRIBUTED.value:
    import jax
    jax.distributed.initialize()
  try:
    summary = run_pretraining(_CONFIG.value, _WORKDIR.value, afresh=_AFRESH.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
  print(f"{summary['attention']}: held-out MLM accuracy {summary['mlm_accuracy']:.1%}, "
        f"SOP accuracy {summary['sop_accuracy']:.1%}, "
        f"{throughput(summary)} tokens/s on {summary['devices']} {summary['device_kind']}")
  if "hybrid_weights" in summary:
    print("HNAS u per layer (mean over heads): "
          + ", ".join(f"{u:.3f}" for u in summary["hybrid_weights"]))
  print(f"wrote {_WORKDIR.value}/summary.json")


if __name__ == "__main__":
  app.run(main)
