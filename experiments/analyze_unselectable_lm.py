"""Table 1 of Brody et al.: unselectable keys in a small GPT-2-style LM trained with and without
LayerNorm's scaling before attention (and Appendix D's Table 2, before vs after the LayerNorm).

  python experiments/analyze_unselectable_lm.py --workdir results/unselectable_lm

Trains both variants in one compiled program (default: the offline Shakespeare corpus, reduced
steps; --config.data.corpus=wikipedia with a network), counts per layer the keys that no query
can select on held-out windows, and writes summary.json, table1.md and train_loss.png to
--workdir. Every field of ``normattn_jax.analysis.causal_lm_keys.default_config`` can be
overridden, e.g. --config.train.num_steps=3000. A killed run resumes from its checkpoints when
restarted with the same command; a workdir of another config is refused (exit code 2) unless
--afresh moves it aside.
"""
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax.analysis import causal_lm_keys
from normattn_jax.reporting import analysis_figures
from normattn_jax.train import cli
from normattn_jax.train.checkpoint import WorkdirError

_CONFIG = config_flags.DEFINE_config_dict("config", causal_lm_keys.default_config(),
                                          "The run's settings.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results and checkpoints.")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside (to "
                            "WORKDIR.replaced-<UTC time>) and start anew.")
_CPU_DEVICES = cli.define_cpu_devices_flag()
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  cli.split_cpu(_CPU_DEVICES.value)  # one device per core, before JAX starts
  cli.enable_compilation_cache()
  workdir = _WORKDIR.value
  try:
    summary = causal_lm_keys.run(_CONFIG.value, workdir, afresh=_AFRESH.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)
  table = causal_lm_keys.table_markdown(summary, causal_lm_keys.PAPER)
  with open(os.path.join(workdir, "table1.md"), "w") as f:
    f.write("% of keys that no query can select, per layer (ours: mean ± std over "
            f"{summary['num_sequences']} held-out windows of {summary['window']} tokens)\n\n")
    f.write(table)
  analysis_figures.causal_lm_loss(summary, os.path.join(workdir, "train_loss.png"))
  print(table)
  for name, variant in summary["variants"].items():
    for seed, entry in enumerate(variant["seeds"]):
      heldout = entry.get("heldout_loss")
      print(f"{variant['label']}, seed {seed}: final training loss "
            f"{entry['final_train_loss']:.3f}, held-out loss "
            + ("n/a" if heldout is None else f"{heldout:.3f}"))
  print(f"wrote {workdir}/summary.json, table1.md, train_loss.png")


if __name__ == "__main__":
  app.run(main)
