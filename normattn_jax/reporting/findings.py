"""A verdict's findings, read as a sequence: its numbers in the order written, each with its sign
(an interval's two ends in their order), and the words that carry a finding (``WORDS``: verdict
words, comparisons, outcomes and number words such as "two of the six").

The same reading applies to a paragraph of REPRODUCTION.md and to its spec's *précis*, a string
that states the paragraph's findings in order from the files (``reporting.verdicts``); the two
sequences must be equal. A number of a paper is written into a précis as a quote,
``«value|source»`` (``quote``): read as the number itself, marked as the paper's, and the sentence
of the paragraph that holds it must name the paper, or, for the authors' stored results, the
authors (``names_its_source``).
"""
from __future__ import annotations

import dataclasses
import difflib
import re

# A number as the document writes it: 1,000; 94.3; 2.19e-4; 0.027; with its unit, 2.5M, 414K, 4x.
# A digit glued to a letter, a dot, a caret or a slash before it (L1, d128, .json, 0.3^7, N/2) is
# part of a name or a power.
NUMBER = re.compile(r"(?<![\w.^/])(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)[KMx]?(?![\w])")
# What may stand before a sign: the start, a space or an opening bracket ("-87", "(-20"); after a
# digit a dash is an interval's ("1.7-2.0"), after a letter a hyphen ("5-against-5").
SIGN_AFTER = " \t\n(["
CODE = re.compile(r"`[^`]*`")

# The words that carry a finding, each with the word of the opposite finding (which
# ``reporting.mutations`` writes in its place; "fully" and "trail" read as no finding word at
# all, so dropping a "partly" or turning a "beats" around changes the sequence too).
OPPOSITES = {
    # verdict words
    "not reproduced": "reproduced", "reproduced": "not reproduced", "partly": "fully",
    # comparisons
    "above": "below", "below": "above", "higher": "lower", "lower": "higher",
    "highest": "lowest", "lowest": "highest", "ahead": "behind", "behind": "ahead",
    "earlier": "later", "later": "earlier", "faster": "slower", "slower": "faster",
    "leads": "trails", "trails": "leads", "lead": "trail", "beats": "trails", "beat": "trail",
    # outcomes
    "learns": "fails", "fails": "learns", "learn": "fail", "fail": "learn", "learned": "failed",
    "failed": "learned", "failing": "succeeding", "holds": "fails", "hold": "fail",
}
NUMBER_WORDS = ("none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve")
WORDS = tuple(sorted({*OPPOSITES, "trail", *NUMBER_WORDS}, key=len, reverse=True))
WORD = re.compile(r"\b(" + "|".join(w.replace(" ", r"\s+") for w in WORDS) + r")\b",
                  re.IGNORECASE)
# A paper's number in a précis: «value|where the paper prints it».
QUOTE = re.compile(r"«([^|»]*)\|([^»]*)»")
# A source whose numbers are the authors' stored results rather than the paper's text.
AUTHORS_SOURCE = re.compile(r"^the (NAP )?authors'")
# A sentence ends at ., ; or : before a space and a capital, a bracket, a quote or emphasis.
SENTENCE_END = re.compile(r"(?<=[.;:])\s+(?=[A-Z(\"*\[])")


@dataclasses.dataclass(frozen=True)
class Token:
  """One finding of a text: a number (with its sign) or a finding word (lower case, one space);
  ``start`` its offset in the text, ``source`` where a paper prints it, for a quote."""
  text: str
  start: int
  source: str | None = None


def quote(value, source: str) -> str:
  """A paper's number (or numbers, "36.6 / 36.7") as a précis writes it: marked as a quote of
  ``source`` (the paper, and its table, figure or section)."""
  return f"«{value}|{source}»"


def blank_code(text: str) -> str:
  """The text with its code spans (paths, names) blanked, offsets kept."""
  return CODE.sub(lambda m: " " * len(m.group()), text)


def numbers_in(text: str) -> list[Token]:
  """The numbers of a text (code spans aside), each with its sign where one stands before it."""
  text = blank_code(text)
  out = []
  for m in NUMBER.finditer(text):
    start = m.start()
    if (start > 0 and text[start - 1] in "-+"
        and (start == 1 or text[start - 2] in SIGN_AFTER)):
      start -= 1
    out.append(Token(text[start:m.end()], start))
  return out


def words_in(text: str) -> list[Token]:
  """The finding words of a text (code spans aside), lower case, each phrase with one space."""
  return [Token(" ".join(m.group().lower().split()), m.start())
          for m in WORD.finditer(blank_code(text))]


def tokens(text: str) -> list[Token]:
  """A paragraph's findings in the order written: numbers and finding words."""
  return sorted(numbers_in(text) + words_in(text), key=lambda t: t.start)


def precis_tokens(precis: str) -> list[Token]:
  """A précis' findings in order; each token of a quote carries its source."""
  out, last = [], 0
  for m in QUOTE.finditer(precis):
    out += [dataclasses.replace(t, start=t.start + last) for t in tokens(precis[last:m.start()])]
    out += [Token(t.text, m.start() + t.start, m.group(2)) for t in tokens(m.group(1))]
    last = m.end()
  out += [dataclasses.replace(t, start=t.start + last) for t in tokens(precis[last:])]
  return out


def sentence_at(text: str, offset: int) -> str:
  """The sentence of ``text`` that holds ``offset``, on one line."""
  start = 0
  for m in SENTENCE_END.finditer(text):
    if m.start() >= offset:
      return " ".join(text[start:m.start()].split())
    start = m.end()
  return " ".join(text[start:].split())


def differences(paragraph: str, precis: str, limit: int = 3) -> list[str]:
  """Where a paragraph's findings differ from its précis' (at most ``limit``, each with the
  sentence it is in), and each quote of a paper whose sentence does not name the paper."""
  found, expected = tokens(paragraph), precis_tokens(precis)
  have, want = [t.text for t in found], [t.text for t in expected]
  out = []
  if have != want:
    matcher = difflib.SequenceMatcher(a=have, b=want, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
      if tag == "equal":
        continue
      at = found[i1].start if i1 < len(found) else len(paragraph)
      out.append(f"the paragraph has {have[i1:i2]} where the files give {want[j1:j2]}, in "
                 f"\"{_short(sentence_at(paragraph, at))}\"")
      if len(out) == limit:
        break
    return out
  for token, spec in zip(found, expected):
    sentence = sentence_at(paragraph, token.start)
    if spec.source and not names_its_source(sentence, spec.source):
      out.append(f"{token.text} is a quote of {spec.source} but its sentence does not say "
                 f"so: \"{_short(sentence)}\"")
  return out


def names_its_source(sentence: str, source: str) -> bool:
  """Whether a sentence says whose a quoted number is: the paper's, or the authors'."""
  return ("authors" if AUTHORS_SOURCE.match(source) else "paper") in sentence.lower()


def _short(sentence: str, width: int = 160) -> str:
  return sentence if len(sentence) <= width else sentence[:width - 3] + "..."
