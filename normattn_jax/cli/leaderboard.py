"""The report cards side by side: normattn-leaderboard [--cards results/report_cards]
[--out REPORT_CARDS.md] [--norewrite_cards]

Reads every <cards>/<name>/report.json (what normattn-card writes), judges every card of the
newest protocol as one family (which columns rank, each pair's word, the words' stability over
random halvings of the seeds) and writes the board, with a section per LM board of a larger
scale (<cards>/lm_<scale>/lm_board.json, experiments/card_lms.py's). Then it writes each card's
words again from the board's family (its report.json's comparisons and verdicts, report.md and
accuracy.png; the numbers stay as they are), so that no card says other than the board:
--norewrite_cards leaves the cards as they are (their words are then their own, provisional).
A card folder with no report.json yet (a card still running, or stopped) is named and the
board left as it is.
"""
import os

from absl import app, flags

from normattn_jax.card.text import write_report
from normattn_jax.reporting import figures, leaderboard
from normattn_jax.cli.command import parse_flags

_CARDS = flags.DEFINE_string("cards", "results/report_cards", "Folder of the cards' folders.")
_OUT = flags.DEFINE_string("out", "REPORT_CARDS.md", "The table's file.")
_REWRITE = flags.DEFINE_bool("rewrite_cards", True, "Write each judged card's words and figure "
                             "again from the board's family.")


def _main(argv):
  del argv
  try:  # a missing or empty folder, or a damaged card, before anything is written
    paths = leaderboard.report_paths(_CARDS.value)
    reports = [leaderboard.read_report(path) for path in paths]
    protocol = leaderboard.judged_protocol(reports)
    judged_reports = [r for r in reports if r.get("protocol") == protocol]
    judged = leaderboard.judge(judged_reports) if judged_reports else None
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  print(f"judged {len(judged_reports)} card(s) of protocol {protocol} as one family")
  text = leaderboard.markdown(reports, judged, leaderboard.read_lm_boards(_CARDS.value))
  partial = _OUT.value + ".partial"  # the board replaces the old one only once it is whole
  with open(partial, "w") as f:
    f.write(text)
  os.replace(partial, _OUT.value)
  if _REWRITE.value and judged is not None:
    for path, report in zip(paths, reports):
      if report.get("protocol") == protocol:
        folder = os.path.dirname(path)
        worded = leaderboard.card_words(judged, report)
        write_report(worded, folder)
        figures.card_accuracy(worded, os.path.join(folder, "accuracy.png"))
    print(f"wrote the words of {len(judged_reports)} card(s) again from the board's family")
  print(f"{_OUT.value}: {len(judged_reports)} card(s) judged, "
        f"{len(reports) - len(judged_reports)} of an earlier protocol")


def main():
  """The console script ``normattn-leaderboard``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
