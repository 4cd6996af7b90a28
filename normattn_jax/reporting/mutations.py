"""What the verdict check catches: every edit of a verdict paragraph that changes a finding,
drawn by kind, applied to the document one at a time, and checked.

The kinds (``KINDS``) are the edits a careless or motivated rewrite makes: a value changed (its
last digit raised by one), two numbers of one sentence swapped, a number's sign flipped (or a
minus put before it), an interval written backwards ("1.7-2.0" as "2.0-1.7"), a number word
changed ("four" to "five") and a finding word turned into its opposite (``findings.OPPOSITES``:
above to below, reproduced to not reproduced, partly dropped, learns to fails).

``Measure`` checks an edited document as ``verdicts.check`` does, restricted to what an edit of a
verdict paragraph can change: the edited verdict (found again by its opening, against its précis,
computed once) and the quoted fragments (``reproduction.QUOTES``, computed once), some of which
lie in verdict paragraphs; the fenced tables lie outside them.
"""
from __future__ import annotations

import collections
import dataclasses
import random
import re

from normattn_jax.reporting import findings, verdicts
from normattn_jax.reporting import reproduction as rep

KINDS = ("value", "swap", "sign", "interval", "number word", "verdict word")
UNIT = re.compile(r"^([-+]?[\d.,e-]*\d)(.*)$")


@dataclasses.dataclass(frozen=True)
class Mutation:
  """One edit of the document: its spans ``(start, end)`` replaced by ``new`` texts."""
  kind: str
  verdict: str
  edits: tuple[tuple[int, int, str], ...]

  def apply(self, document: str) -> str:
    """The document with the edits made."""
    for start, end, new in sorted(self.edits, reverse=True):
      document = document[:start] + new + document[end:]
    return document

  def describe(self, document: str) -> str:
    """"'28.7' -> '40.0'; '40.0' -> '28.7'": the edits, with the document's text they replace."""
    return "; ".join(f"{document[start:end]!r} -> {new!r}" for start, end, new in self.edits)


def raised(number: str) -> str:
  """The number with its last digit raised by one (9 -> 0)."""
  last = max(i for i, c in enumerate(number) if c.isdigit())
  return number[:last] + str((int(number[last]) + 1) % 10) + number[last + 1:]


def opposite(word_text: str) -> str:
  """A finding word's opposite (``findings.OPPOSITES``), or a number word's neighbour, in the
  word's capitalisation."""
  key = " ".join(word_text.lower().split())
  if key in findings.NUMBER_WORDS:
    index = findings.NUMBER_WORDS.index(key)
    new = findings.NUMBER_WORDS[index + 1 if index + 1 < len(findings.NUMBER_WORDS) else index - 1]
  else:
    new = findings.OPPOSITES[key]
  return new[:1].upper() + new[1:] if word_text[:1].isupper() else new


def sentences(paragraph: str) -> list[tuple[int, int]]:
  """``(start, end)`` of each sentence of a paragraph (``findings.SENTENCE_END``)."""
  out, start = [], 0
  for m in findings.SENTENCE_END.finditer(paragraph):
    out.append((start, m.start()))
    start = m.end()
  return out + [(start, len(paragraph))]


def mutations(document: str, verdict: verdicts.Verdict) -> list[Mutation]:
  """Every edit of each kind in one verdict's paragraph."""
  paragraph = verdicts.paragraph_of(document, verdict.opening)
  base = document.index(paragraph)
  text = findings.blank_code(paragraph)
  numbers = findings.numbers_in(paragraph)
  out = []
  edit = lambda kind, *spans: out.append(Mutation(kind, verdict.id, tuple(
      (base + start, base + end, new) for start, end, new in spans)))
  for t in numbers:
    edit("value", (t.start, t.start + len(t.text), raised(t.text)))
    if t.text[0] in "-+":
      edit("sign", (t.start, t.start + 1, "+" if t.text[0] == "-" else "-"))
    elif t.start == 0 or text[t.start - 1] in findings.SIGN_AFTER:
      edit("sign", (t.start, t.start, "-"))
  for first, second in zip(numbers, numbers[1:]):
    low_end = first.start + len(first.text)
    if text[low_end:second.start] == "-" and first.text != second.text:
      (a, unit_a), (b, unit_b) = (UNIT.match(t.text).groups() for t in (first, second))
      edit("interval", (first.start, low_end, b + unit_a),
           (second.start, second.start + len(second.text), a + unit_b))
  for start, end in sentences(paragraph):
    inside = [t for t in numbers if start <= t.start < end]
    for i, a in enumerate(inside):
      for b in inside[i + 1:]:
        if a.text != b.text:
          edit("swap", (a.start, a.start + len(a.text), b.text),
               (b.start, b.start + len(b.text), a.text))
  for m in findings.WORD.finditer(text):
    kind = ("number word" if m.group().lower() in findings.NUMBER_WORDS else "verdict word")
    edit(kind, (m.start(), m.end(), opposite(m.group())))
  return out


class Measure:
  """Checks edited copies of one document against the files, as ``verdicts.check`` would: the
  précis and the quotes computed once, and an edited verdict paragraph read on its own (the
  other paragraphs, and so the fenced tables, are the document's)."""

  def __init__(self, document: str, results: rep.Results, specs=None):
    self.document, self.results = document, results
    self.specs = {v.id: v for v in (verdicts.VERDICTS if specs is None else specs)}
    self.precis = {i: verdicts.precis_of(v, results) for i, v in self.specs.items()}
    self.paragraphs = {}
    for i, v in self.specs.items():
      paragraph = verdicts.paragraph_of(document, v.opening)
      self.paragraphs[i] = (document.index(paragraph), paragraph)
    quotes = [rep._normalised(q.text(results)) for q in rep.QUOTES]
    self.quotes = {i: [q for q in quotes if q in rep._normalised(paragraph)]
                   for i, (_, paragraph) in self.paragraphs.items()}

  def edited(self, mutation: Mutation) -> str:
    """The mutation's verdict paragraph with its edits made."""
    start, paragraph = self.paragraphs[mutation.verdict]
    return Mutation(mutation.kind, mutation.verdict, tuple(
        (a - start, b - start, new) for a, b, new in mutation.edits)).apply(paragraph)

  def problems(self, mutation: Mutation) -> list[str]:
    """What the check finds in the document with the mutation made."""
    verdict = self.specs[mutation.verdict]
    paragraph = self.edited(mutation)
    opens = rep._normalised(paragraph).startswith(rep._normalised(verdict.opening))
    out = verdicts.verdict_problems(paragraph if opens else None, verdict, self.results,
                                    self.precis[verdict.id])
    flat = rep._normalised(paragraph)
    return out + [f"quote {q!r} lost" for q in self.quotes[verdict.id] if q not in flat]

  def caught(self, mutation: Mutation) -> bool:
    """Whether the check reports the mutation."""
    return bool(self.problems(mutation))

  def all_mutations(self) -> list[Mutation]:
    """Every edit of every kind in every verdict paragraph."""
    return [m for v in self.specs.values() for m in mutations(self.document, v)]


def sample(all_mutations: list[Mutation], per_kind: int, seed: int = 0) -> list[Mutation]:
  """``per_kind`` mutations of each kind, drawn with ``seed`` from every verdict's."""
  by_kind = collections.defaultdict(list)
  for m in all_mutations:
    by_kind[m.kind].append(m)
  rng = random.Random(seed)
  return [m for kind in KINDS for m in rng.sample(by_kind[kind], min(per_kind,
                                                                       len(by_kind[kind])))]


def shares(measure: Measure, drawn: list[Mutation]) -> tuple[dict, list[Mutation]]:
  """``({kind: (caught, drawn)}, the mutations that passed)``."""
  counts = {kind: [0, 0] for kind in KINDS}
  missed = []
  for m in drawn:
    counts[m.kind][1] += 1
    if measure.caught(m):
      counts[m.kind][0] += 1
    else:
      missed.append(m)
  return {kind: tuple(c) for kind, c in counts.items()}, missed


def report(counts: dict) -> str:
  """One line per kind: caught / drawn and the share."""
  return "\n".join(f"{kind:>12}: {caught:5d} / {drawn:5d} caught ({caught / max(drawn, 1):.1%})"
                   for kind, (caught, drawn) in counts.items())
