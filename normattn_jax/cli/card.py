"""One normalisation through the four papers' diagnostics and today's papers' own claims: its
report card.

  normattn-card --config.attention.name=dnas --config.scale=cpu \
      --workdir=cards/dnas
  normattn-card --plugins=my_norms --config.attention.name=tempered_sigmoid \
      --config.attention.options.temperature=2.0 --config.scale=smoke --workdir=cards/tempered

Trains the normalisation in the MTE layout on the NAP paper's case, first-token and mode tasks
beside softmax (MTE) and NAP, each arm's learning rate selected on selection seeds and the arm
trained again at it on fresh evaluation seeds; the baselines are trained once per scale and
machine in --config.baselines_dir (default: <parent of workdir>/baselines/<scale>-<machine>,
shared by every card of this machine there; a named folder of another machine is refused). Then
explaining away and the mode-collapse toy (DNAS paper), unselectable keys (LayerNorm paper), a
causal LM per arm for the registered diagnostics (length generalisation, attention sinks,
massive activations, sparsity, a plugin's own) and the cost against softmax; every comparison
with a bootstrap interval and Benjamini-Hochberg's control. Writes WORKDIR/report.md,
report.json and accuracy.png. --config.scale: smoke (minutes, numbers that mean little; the
default), cpu (2 cores), paper (the NAP paper's sizes, for a GPU);
--config.show_progress=False hides the sweeps' progress bars. A killed card resumes when run
again; a workdir of another normalisation, options, scale or machine is refused (exit code 2)
unless --afresh moves it aside. The config: normattn_jax/configs/report_card.py; the library:
normattn_jax/card/train.py.
"""
from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag("report_card", "A report card's config.")
_RUN = cli.define_run_flags(budget=False)


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="report_card")


def main():
  """The console script ``normattn-card``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
