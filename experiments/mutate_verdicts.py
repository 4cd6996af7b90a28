"""What REPRODUCTION.md's verdict check catches, measured by editing the verdict paragraphs one
edit at a time, of every kind (``reporting.mutations.KINDS``: a value changed, two numbers of a
sentence swapped, a sign flipped, an interval written backwards, a number word changed, a finding
word turned into its opposite), and checking each edited document against the files as
``reporting.verdicts.check`` does; an edit it reports is caught.

  python experiments/mutate_verdicts.py                 # every edit: the share caught per kind
  python experiments/mutate_verdicts.py --per_kind=20   # a sample of 20 edits per kind
  python experiments/mutate_verdicts.py --missed        # also every edit that passes

Exit 1 when the unchanged document does not pass the check (nothing to measure), 3 when a kind's
share caught is below --goal.
"""
import collections
import sys

from absl import app, flags

from normattn_jax.reporting import mutations, verdicts
from normattn_jax.reporting.reproduction import Results
from normattn_jax.cli.command import parse_flags

_DOCUMENT = flags.DEFINE_string("document", "REPRODUCTION.md", "The document.")
_RESULTS = flags.DEFINE_string("results", "results", "The folder of the committed results.")
_PER_KIND = flags.DEFINE_integer("per_kind", 0, "Edits drawn per kind (0: every edit).")
_SEED = flags.DEFINE_integer("seed", 0, "The seed of the sample.")
_GOAL = flags.DEFINE_float("goal", 0.95, "The share of each kind that must be caught.")
_MISSED = flags.DEFINE_bool("missed", False, "List each edit that is not caught.")


def main(argv):
  del argv
  with open(_DOCUMENT.value) as f:
    document = f.read()
  results = Results(_RESULTS.value)
  if verdicts.check(document, results):
    print("the document does not pass the check as it is: nothing to measure", file=sys.stderr)
    return 1
  measure = mutations.Measure(document, results)
  every = measure.all_mutations()
  drawn = mutations.sample(every, _PER_KIND.value, _SEED.value) if _PER_KIND.value else every
  counts, missed = mutations.shares(measure, drawn)
  per_verdict = collections.Counter(m.verdict for m in drawn)
  print(f"{len(drawn)} edits of {len(per_verdict)} verdict paragraphs "
        f"({len(every)} possible), each checked alone:")
  print(mutations.report(counts))
  if _MISSED.value:
    for m in missed:
      print(f"  missed ({m.kind}, verdict {m.verdict}): {m.describe(document)}")
  low = [kind for kind, (caught, n) in counts.items() if n and caught / n < _GOAL.value]
  if low:
    print(f"below the goal of {_GOAL.value:.0%}: {', '.join(low)}", file=sys.stderr)
    return 3
  return 0


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
