"""The report cards side by side: python experiments/leaderboard.py [--cards results/report_cards]
[--out REPORT_CARDS.md] [--rewrite_cards]

Reads every <cards>/<name>/report.json (what experiments/report_card.py writes) and writes the
board: the normalisations x the diagnostics, every card judged again over the whole board, the
columns that separate and the verdicts' stability; a card folder with no report.json yet (a card
still running, or stopped) is named and the board left as it is. --rewrite_cards first writes
each card's verdicts, report.md and accuracy.png again from its report.json (after a change of
wording; the numbers stay as they are).
"""
import os

from absl import app, flags

from normattn_jax.reporting import leaderboard
from normattn_jax.reporting.report_card import PROTOCOL
from normattn_jax.reporting.report_card_text import write_report
from normattn_jax.train import cli

_CARDS = flags.DEFINE_string("cards", "results/report_cards", "Folder of the cards' folders.")
_OUT = flags.DEFINE_string("out", "REPORT_CARDS.md", "The table's file.")
_REWRITE = flags.DEFINE_bool("rewrite_cards", False, "Write each current card's words and figure "
                             "again from its report.json first.")


def main(argv):
  del argv
  try:  # a missing or empty folder, or a damaged card, before anything is written
    reports = leaderboard.read_reports(_CARDS.value)
  except (OSError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  if _REWRITE.value:
    for report in reports:
      if report.get("protocol") == PROTOCOL:
        write_report(report, os.path.join(_CARDS.value, report["name"]))
  text = leaderboard.markdown(reports)
  partial = _OUT.value + ".partial"  # the board replaces the old one only once it is whole
  with open(partial, "w") as f:
    f.write(text)
  os.replace(partial, _OUT.value)
  current = sum(r.get("protocol") == PROTOCOL for r in reports)
  print(f"{_OUT.value}: {current} card(s) judged, {len(reports) - current} of an earlier protocol")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
