"""The LM part of the report cards alone: every causal normalisation's LM beside softmax's and
NAP's, at a size where the phenomena its diagnostics look for may exist (attention sinks,
massive activations, the loss past the training length), each arm's learning rate selected on
its selection seeds, its evaluation seeds trained, the controls and the n-gram level measured.

  python experiments/card_lms.py --scale=gpu --workdir=runs/card_lms_gpu [--max_minutes=M]
      [--names=ssmax,softpick] [--cache_dir=...] [--corpus_file=...]

--scale: smoke (seconds on a CPU), cpu (the cards' own LM part) or gpu (report_card.LM_PLANS:
d = 256, 6 layers, L = 256, 5000 steps, for a GPU). Every run resumes where it stopped: with
--max_minutes the command stops after the chunk that passes the time, its checkpoints written
(exit code 3), and the same command goes on (benchmarks/gpu_checks.sh runs it a slice per loan,
step f_card_lm). When every arm is done it writes WORKDIR/lm_board.json (per-seed results,
selections, references: small json); copied to results/report_cards/lm_<scale>/lm_board.json,
it joins REPORT_CARDS.md when normattn-leaderboard runs.
"""
import sys

from absl import app, flags

from normattn_jax.card import train as rc
from normattn_jax.cli.command import INTERRUPTED_EXIT
from normattn_jax.train.driver import Budget, Interrupted

_SCALE = flags.DEFINE_enum("scale", "gpu", list(rc.LM_PLANS), "The LM plan.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the runs and lm_board.json go.")
_NAMES = flags.DEFINE_list("names", [], "Normalisations beside softmax and NAP (default: every "
                           "built-in one a causal LM can run).")
_MAX_MINUTES = flags.DEFINE_float("max_minutes", 0.0, "Stop after the chunk that passes this "
                                  "wall time, checkpoints written (0: no limit).", lower_bound=0.0)
_CACHE = flags.DEFINE_string("cache_dir", "", "The corpus cache (default ~/.cache/normattn_jax).")
_CORPUS = flags.DEFINE_string("corpus_file", "", "A local UTF-8 text in place of Shakespeare.")
flags.mark_flag_as_required("workdir")


def main(argv):
  del argv
  names = _NAMES.value or rc.causal_normalizations()
  try:
    board = rc.run_lm_board(names, _SCALE.value, _WORKDIR.value, cache_dir=_CACHE.value,
                            corpus_file=_CORPUS.value, budget=Budget(minutes=_MAX_MINUTES.value))
  except ValueError as err:
    raise app.UsageError(str(err)) from None
  except Interrupted as stopped:
    print(f"stopped: {stopped}; the same command resumes")
    sys.exit(INTERRUPTED_EXIT)
  print(f"{_WORKDIR.value}/{rc.LM_BOARD}: {len(board['arms'])} arms at the {_SCALE.value} scale")


if __name__ == "__main__":
  app.run(main)
