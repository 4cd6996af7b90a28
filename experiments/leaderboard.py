"""The report cards side by side: python experiments/leaderboard.py [--cards results/report_cards]
[--out REPORT_CARDS.md]

Reads every <cards>/<name>/report.json (what experiments/report_card.py writes) and writes the
table of normalisations x diagnostics, with what each column means and how sure it is.
"""
from absl import app, flags

from normattn_jax.reporting import leaderboard

_CARDS = flags.DEFINE_string("cards", "results/report_cards", "Folder of the cards' folders.")
_OUT = flags.DEFINE_string("out", "REPORT_CARDS.md", "The table's file.")


def main(argv):
  del argv
  text = leaderboard.markdown(leaderboard.read_reports(_CARDS.value))
  with open(_OUT.value, "w") as f:
    f.write(text)
  print(f"{_OUT.value}: {text.count(chr(10) + '| `')} normalisation(s)")


if __name__ == "__main__":
  app.run(main)
