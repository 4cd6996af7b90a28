"""How many of REPRODUCTION.md's verdict numbers the check catches, measured by changing them one
by one: each number of each verdict paragraph (``**Verdict ...``) gets its last digit raised by
one (9 -> 0), and the whole check (``reporting.verdicts.check``: the tables, the quotes and the
verdict specs) runs on the changed document; a change it reports is caught.

  python experiments/mutate_verdicts.py            # the rate, per paragraph and in all
  python experiments/mutate_verdicts.py --missed   # also every number a change of which passes

Exit 1 when the unchanged document does not pass the check (nothing to measure).
"""
import re
import sys

from absl import app, flags

from normattn_jax.reporting import verdicts
from normattn_jax.reporting.reproduction import Results
from normattn_jax.train import cli

_DOCUMENT = flags.DEFINE_string("document", "REPRODUCTION.md", "The document.")
_RESULTS = flags.DEFINE_string("results", "results", "The folder of the committed results.")
_MISSED = flags.DEFINE_bool("missed", False, "List each number whose change is not caught.")


def mutated(number: str) -> str:
  """The number with its last digit raised by one (9 -> 0)."""
  last = max(i for i, c in enumerate(number) if c.isdigit())
  return number[:last] + str((int(number[last]) + 1) % 10) + number[last + 1:]


def numbers_at(document: str, paragraph: str):
  """``(offset in the document, number)`` of each number of a paragraph (code spans aside)."""
  start = document.index(paragraph)
  blanked = verdicts.CODE.sub(lambda m: " " * len(m.group()), paragraph)
  return [(start + m.start(), m.group()) for m in verdicts.NUMBER.finditer(blanked)]


def main(argv):
  del argv
  with open(_DOCUMENT.value) as f:
    document = f.read()
  results = Results(_RESULTS.value)
  if verdicts.check(document, results):
    print("the document does not pass the check as it is: nothing to measure", file=sys.stderr)
    return 1
  total = caught = 0
  for paragraph in verdicts.verdict_paragraphs(document):
    here, missed = 0, []
    places = numbers_at(document, paragraph)
    for offset, number in places:
      changed = document[:offset] + mutated(number) + document[offset + len(number):]
      if verdicts.check(changed, results):
        here += 1
      else:
        missed.append(number)
    total, caught = total + len(places), caught + here
    title = re.sub(r"\s+", " ", paragraph[:72])
    print(f"{here:3d} / {len(places):3d}  {title}")
    if _MISSED.value and missed:
      print(f"           missed: {' '.join(missed)}")
  count = len(verdicts.verdict_paragraphs(document))
  print(f"caught {caught} of {total} changed numbers in {count} verdict paragraphs: "
        f"{caught / max(total, 1):.1%}")
  return 0


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
