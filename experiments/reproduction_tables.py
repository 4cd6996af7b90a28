"""Generate, or check, REPRODUCTION.md's numbers from the files under results/.

  python experiments/reproduction_tables.py           # rewrite the fenced tables from the files
  python experiments/reproduction_tables.py --check   # exit 1 where document and files differ

Each table fenced by ``<!-- table: <id> -->`` ... ``<!-- /table -->`` has a spec in
``normattn_jax.reporting.reproduction.TABLES`` (its rows of our results, from which files);
rewriting replaces those rows' cells and leaves every other row (the papers' numbers) as it is.
The numbers quoted in prose (``reproduction.QUOTES``) and every number of a verdict paragraph
that has a spec (``verdicts.VERDICTS``) are checked, never rewritten. Exit codes:
0 the document agrees with the files (or was rewritten to agree), 1 --check found differences,
2 a table or row could not be rendered (a missing fence, row or file).
"""
import os
import sys

from absl import app, flags

from normattn_jax.reporting import reproduction, verdicts
from normattn_jax.cli.command import parse_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_DOCUMENT = flags.DEFINE_string("document", os.path.join(REPO, "REPRODUCTION.md"),
                                "The document to generate or check.")
_RESULTS = flags.DEFINE_string("results", os.path.join(REPO, "results"),
                               "The folder of the committed results.")
_CHECK = flags.DEFINE_bool("check", False, "Only check: list the differences, exit 1 if any.")


def main(argv):
  del argv
  with open(_DOCUMENT.value) as f:
    document = f.read()
  results = reproduction.Results(_RESULTS.value)
  rendered, differences, errors = reproduction.render(document, results)
  quotes, unread = reproduction.quote_problems(document, results)
  quotes += verdicts.problems(document, results)
  errors += unread
  for line in differences + quotes + errors:
    print(line)
  if errors:
    return 2
  if _CHECK.value:
    if differences or quotes:
      print(f"{len(differences) + len(quotes)} difference(s) between {_DOCUMENT.value} and "
            f"{_RESULTS.value}", file=sys.stderr)
      return 1
    print(f"{_DOCUMENT.value} agrees with {_RESULTS.value}: {len(reproduction.TABLES)} tables, "
          f"{len(reproduction.QUOTES)} quotes, {len(verdicts.VERDICTS)} verdicts")
    return 0
  if rendered != document:
    with open(_DOCUMENT.value, "w") as f:
      f.write(rendered)
    print(f"rewrote {len(differences)} cell(s) of {_DOCUMENT.value}")
  if quotes:
    print(f"{len(quotes)} quote(s) or verdict(s) differ from the files: edit the prose",
          file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
