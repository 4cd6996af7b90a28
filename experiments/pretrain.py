"""Pre-train ALBERT with MLM + SOP: python experiments/pretrain.py --config configs/albert_tiny.py
--workdir runs/albert_tiny

Every config field can be overridden, e.g. --config.model.attention=dnas. A killed run resumes
from its newest checkpoint when restarted with the same command; a workdir of another config is
refused (exit code 2) unless --afresh moves it aside. --distributed joins the processes of a
multi-host run (every host runs the same command; on a TPU pod or under SLURM they are detected,
elsewhere give --coordinator_address, --num_processes and --process_id): the batch is sharded
over every device of every host.
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.model.attention=<its name>.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax.attention.registry import load_plugins
from normattn_jax.train import multihost
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.pretrain import run_pretraining, throughput

_CONFIG = config_flags.DEFINE_config_file("config", "configs/albert_tiny.py",
                                          "Path to a configs/albert_*.py file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results and checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Join the processes of a multi-host run "
                                  "(jax.distributed.initialize): every host runs the same command.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", "", "With --distributed: host:port of "
                                   "process 0; empty: detected (TPU pod, SLURM, Open MPI).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 0, "With --distributed: how many "
                                      "processes; 0: detected.")
_PROCESS_ID = flags.DEFINE_integer("process_id", -1, "With --distributed: this process's index; "
                                   "-1: detected.")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside (to "
                            "WORKDIR.replaced-<UTC time>) and start anew.")
_PLUGINS = flags.DEFINE_list("plugins", [], "Modules to import first (on PYTHONPATH), e.g. "
                             "ones that register a normalisation.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  if not _DISTRIBUTED.value and (_COORDINATOR.value or _NUM_PROCESSES.value
                                 or _PROCESS_ID.value >= 0):
    raise app.UsageError("--coordinator_address, --num_processes and --process_id need "
                         "--distributed")
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the progress bar
  load_plugins(_PLUGINS.value)
  if _DISTRIBUTED.value:
    multihost.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
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
