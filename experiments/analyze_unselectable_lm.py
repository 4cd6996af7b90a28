"""Table 1 of Brody et al.: unselectable keys in a small GPT-2-style LM trained with and without
LayerNorm's scaling before attention (and Appendix D's Table 2, before vs after the LayerNorm).

  python experiments/analyze_unselectable_lm.py --workdir results/unselectable_lm

Trains each variant's seeds as one grid of the engine (default: the offline Shakespeare corpus,
reduced steps; --config.data.corpus=wikipedia with a network), counts per layer the keys that no
query can select on held-out windows, and writes summary.json, table1.md and train_loss.png to
--workdir. Every field of configs/unselectable_lm.py (the default --config) can be overridden,
e.g. --config.train.num_steps=3000. A killed run, or one stopped by --max_minutes, resumes from
its checkpoints when restarted with the same command; a workdir of another config is refused
(exit code 2) unless --afresh moves it aside. On a CPU the default device count is the most,
up to one per core, that divides the seeds, so that no device trains a padding copy of a seed.
"""
import functools
import os

from absl import app, flags

from normattn_jax.analysis import causal_lm_keys
from normattn_jax.reporting import analysis_figures
from normattn_jax.train import cli
from normattn_jax.train.driver import Interrupted

_CONFIG = cli.define_config_flag("configs/unselectable_lm.py", "Path to the run's config file.")
_RUN = cli.define_run_flags()
_MAX_MINUTES = flags.DEFINE_float(
    "max_minutes", 0.0, "Stop after the chunk that passes this wall time (0: no limit); "
    "rerun the same command to resume.", lower_bound=0.0)


def write_table(summary: dict, workdir: str) -> str:
  """Table 1 (and Table 2) beside the paper's rows, written to ``table1.md``."""
  table = causal_lm_keys.table_markdown(summary, causal_lm_keys.PAPER)
  with open(os.path.join(workdir, "table1.md"), "w") as f:
    f.write("% of keys that no query can select, per layer (ours: mean ± std over "
            f"{summary['num_sequences']} held-out windows of {summary['window']} tokens)\n\n")
    f.write(table)
  return table


def main(argv):
  del argv
  run = functools.partial(causal_lm_keys.run, max_minutes=_MAX_MINUTES.value)
  try:
    summary = cli.run_command(run, _CONFIG.value, _RUN,
                              divides=(_CONFIG.value.train.seeds,))
  except Interrupted as stop:
    print(f"{stop}; rerun the same command to resume")
    return
  workdir = _RUN.workdir.value
  table = write_table(summary, workdir)
  analysis_figures.causal_lm_loss(summary, os.path.join(workdir, "train_loss.png"))
  print(table)
  for variant in summary["variants"].values():
    for seed, entry in enumerate(variant["seeds"]):
      heldout = entry.get("heldout_loss")
      print(f"{variant['label']}, seed {seed}: final training loss "
            f"{entry['final_train_loss']:.3f}, held-out loss "
            + ("n/a" if heldout is None else f"{heldout:.3f}"))
  print(f"wrote {workdir}/summary.json, table1.md, train_loss.png")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
