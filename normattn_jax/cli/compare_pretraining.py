"""Pre-train UNAS (softmax), DNAS and HNAS ALBERTs on the same data and seeds and compare them
(the DNAS paper's Table 2 and Fig. 4):

  normattn-compare-pretraining --config albert_tiny \
    --workdir results/albert_tiny

Writes WORKDIR/<attention>/ (each run's files, as normattn-pretrain), comparison.json
(held-out MLM / SOP accuracy per scheme, HNAS's u per layer), hybrid_weights.png (Fig. 4: u per
layer, mean and per head) and curves.png (held-out accuracies during training). Runs share
their data (WORKDIR/data) and resume from their checkpoints. Every run's workdir is checked
before any trains: one of another config is refused (exit code 2) unless --afresh moves each
run's workdir aside. --attentions takes any registered normalisation; --plugins=my_norms
imports modules that register more first.
"""
import json
import os
import sys

from absl import app, flags, logging
import numpy as np

from normattn_jax.registry import load_plugins
from normattn_jax.reporting import training_figures
from normattn_jax.cli import command as cli
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.pretrain.train import pretrain_each, throughput, validation_rows

_CONFIG = cli.define_config_flag("albert_tiny", "An ALBERT pre-training config (albert_*).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the runs and the comparison.")
_ATTENTIONS = flags.DEFINE_list("attentions", ["softmax", "dnas", "hnas"],
                                "Attention normalisations to compare.")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move each run's existing workdir aside (to "
                            "WORKDIR/<attention>.replaced-<UTC time>) and start anew.")
_PLUGINS = cli.define_plugins_flag()
flags.mark_flags_as_required(["workdir"])


def _main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  load_plugins(_PLUGINS.value)
  workdir, attentions = _WORKDIR.value, _ATTENTIONS.value
  try:
    results = pretrain_each(_CONFIG.value, workdir, attentions, afresh=_AFRESH.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(cli.WORKDIR_ERROR_EXIT)
  with open(os.path.join(workdir, "comparison.json"), "w") as f:
    json.dump(results, f, indent=2)
  training_figures.pretraining_curves(
      {attention: validation_rows(os.path.join(workdir, attention)) for attention in attentions},
      os.path.join(workdir, "curves.png"))
  print(f"{'attention':>10} {'MLM acc':>8} {'SOP acc':>8} {'tokens/s':>9}")
  for attention, s in results.items():
    print(f"{attention:>10} {100 * s['mlm_accuracy']:8.2f} {100 * s['sop_accuracy']:8.2f} "
          f"{throughput(s):>9}")
  if "hnas" in results:
    u = np.asarray(results["hnas"]["hybrid_weights_per_head"])
    training_figures.hybrid_weights(u, os.path.join(workdir, "hybrid_weights.png"))
    print("HNAS u per layer: " + ", ".join(f"{x:.3f}" for x in u.mean(axis=1)))
  print(f"wrote {workdir}/comparison.json, curves.png"
        + (", hybrid_weights.png" if "hnas" in results else ""))


def main():
  """The console script ``normattn-compare-pretraining``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
