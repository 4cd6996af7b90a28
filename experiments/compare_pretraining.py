"""Pre-train UNAS (softmax), DNAS and HNAS ALBERTs on the same data and seeds and compare them
(the DNAS paper's Table 2 and Fig. 4):

  python experiments/compare_pretraining.py --config configs/albert_tiny.py \
    --workdir results/albert_tiny

Writes WORKDIR/<attention>/ (each run's files, as experiments/pretrain.py), comparison.json
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

import matplotlib
from absl import app, flags, logging

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from normattn_jax.attention.registry import load_plugins  # noqa: E402
from normattn_jax.train import cli  # noqa: E402
from normattn_jax.train.checkpoint import WorkdirError, check_workdir  # noqa: E402
from normattn_jax.train.pretrain import run_pretraining, throughput  # noqa: E402

_CONFIG = cli.define_config_flag("configs/albert_tiny.py", "Path to a configs/albert_*.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the runs and the comparison.")
_ATTENTIONS = flags.DEFINE_list("attentions", ["softmax", "dnas", "hnas"],
                                "Attention normalisations to compare.")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move each run's existing workdir aside (to "
                            "WORKDIR/<attention>.replaced-<UTC time>) and start anew.")
_PLUGINS = flags.DEFINE_list("plugins", [], "Modules to import first (on PYTHONPATH), e.g. "
                             "ones that register a normalisation.")
flags.mark_flags_as_required(["workdir"])


def read_history(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def curves_figure(workdir, attentions, path):
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
  for attention in attentions:
    rows = [r for r in read_history(os.path.join(workdir, attention, "history.jsonl"))
            if r["split"] == "validation"]
    steps = [r["step"] for r in rows]
    for ax, metric in zip(axes, ("mlm_accuracy", "sop_accuracy")):
      ax.plot(steps, [100 * r[metric] for r in rows], marker="o", label=attention)
  for ax, title in zip(axes, ("held-out MLM accuracy (%)", "held-out SOP accuracy (%)")):
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def hybrid_figure(params_u, path):
  """Fig. 4: HNAS's u per layer (0 = softmax, 1 = DNAS), the head mean and every head."""
  layers = np.arange(1, params_u.shape[0] + 1)
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for head in range(params_u.shape[1]):
    ax.scatter(layers, params_u[:, head], s=10, color="0.6")
  ax.plot(layers, params_u.mean(axis=1), marker="o", color="C3", label="mean over heads")
  ax.axhline(0.5, color="0.8", linestyle="--", label="initial u")
  ax.set_xlabel("layer")
  ax.set_ylabel("hybrid weight u (1 = DNAS)")
  ax.set_ylim(-0.05, 1.05)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  load_plugins(_PLUGINS.value)
  workdir = _WORKDIR.value
  config = _CONFIG.value
  if not config.data.cache_dir:
    config.data.cache_dir = workdir
  results = {}
  try:
    if not _AFRESH.value:  # refuse before any run trains
      for attention in _ATTENTIONS.value:
        config.model.attention.name = attention
        check_workdir(os.path.join(workdir, attention), config, "pretraining")
    for attention in _ATTENTIONS.value:
      config.model.attention.name = attention
      print(f"--- {attention}", flush=True)
      results[attention] = run_pretraining(config, os.path.join(workdir, attention),
                                           afresh=_AFRESH.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
  with open(os.path.join(workdir, "comparison.json"), "w") as f:
    json.dump(results, f, indent=2)
  curves_figure(workdir, _ATTENTIONS.value, os.path.join(workdir, "curves.png"))
  print(f"{'attention':>10} {'MLM acc':>8} {'SOP acc':>8} {'tokens/s':>9}")
  for attention, s in results.items():
    print(f"{attention:>10} {100 * s['mlm_accuracy']:8.2f} {100 * s['sop_accuracy']:8.2f} "
          f"{throughput(s):>9}")
  if "hnas" in results:
    u = np.asarray(results["hnas"]["hybrid_weights_per_head"])
    hybrid_figure(u, os.path.join(workdir, "hybrid_weights.png"))
    print("HNAS u per layer: " + ", ".join(f"{x:.3f}" for x in u.mean(axis=1)))
  print(f"wrote {workdir}/comparison.json, curves.png"
        + (", hybrid_weights.png" if "hnas" in results else ""))


if __name__ == "__main__":
  app.run(main)
