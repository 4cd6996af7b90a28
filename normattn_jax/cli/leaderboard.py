"""The report cards side by side: normattn-leaderboard [--cards results/report_cards]
[--out REPORT_CARDS.md] [--rewrite_cards]

Reads every <cards>/<name>/report.json (what normattn-card writes) and writes the
board: the normalisations x the diagnostics, every card judged again over the whole board, the
columns that separate and the verdicts' stability; a card folder with no report.json yet (a card
still running, or stopped) is named and the board left as it is. --rewrite_cards first writes
each card's verdicts, report.md and accuracy.png again from its report.json (after a change of
wording; the numbers stay as they are).
"""
import os

from absl import app, flags

from normattn_jax.card.text import write_report
from normattn_jax.card.train import PROTOCOL
from normattn_jax.reporting import figures, leaderboard
from normattn_jax.cli.command import parse_flags

_CARDS = flags.DEFINE_string("cards", "results/report_cards", "Folder of the cards' folders.")
_OUT = flags.DEFINE_string("out", "REPORT_CARDS.md", "The table's file.")
_REWRITE = flags.DEFINE_bool("rewrite_cards", False, "Write each current card's words and figure "
                             "again from its report.json first.")


def _main(argv):
  del argv
  try:  # a missing or empty folder, or a damaged card, before anything is written
    reports = leaderboard.read_reports(_CARDS.value)
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  if _REWRITE.value:
    for report in reports:
      if report.get("protocol") == PROTOCOL:
        folder = os.path.join(_CARDS.value, report["name"])
        write_report(report, folder)
        figures.card_accuracy(report, os.path.join(folder, "accuracy.png"))
  text = leaderboard.markdown(reports)
  partial = _OUT.value + ".partial"  # the board replaces the old one only once it is whole
  with open(partial, "w") as f:
    f.write(text)
  os.replace(partial, _OUT.value)
  current = sum(r.get("protocol") == PROTOCOL for r in reports)
  print(f"{_OUT.value}: {current} card(s) judged, {len(reports) - current} of an earlier protocol")


def main():
  """The console script ``normattn-leaderboard``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
