"""What each registered normalisation is, read off the registry: its paper, whether its rows
sum to 1, whether it may run under a causal mask and decode step by step, its paths and its
parameters. The README's table and the docs' are ``table()``'s output, so that they say what
the registry holds.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax.attention import registry

__all__ = ["Properties", "properties", "table"]

# The rows are probed on logits this spread (N(0, SPREAD^2)) and one row of equal, large ones,
# so that a normalisation whose rows may pass 1 (sigmoid) shows it; every row has masked keys.
SPREAD = 5.0
LARGE = 10.0
QUERIES, KEYS, MASKED = 16, 7, 2
TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class Properties:
  """The properties of one normalisation that a user chooses by.

  Attributes:
    name: the registered name.
    paper: ``(citation, address)`` of its paper, or None.
    row_sums: "1" where every row of weights is a probability distribution over the valid
      keys, "at most 1" where the weights are >= 0 and a row may sum to less, "signed" where
      weights may be negative, "any" where a row may sum to more than 1.
    causal_safe: a causal mask keeps every query from the later positions
      (``Normalization.causal_safe``, which a causal call of one without it is refused for).
      False for the normalisations that also normalise over the queries (DNAS, HNAS, Sinkhorn):
      each key's weights are normalised over all queries, later ones included; and for a
      plugin that does not declare it.
    decodes: it decodes step by step from a key/value cache (``decode=True``), which needs
      rows that do not depend on later queries.
    fast: it has an exact path that never forms the weights (``implementation="fast"``).
    fused: it has a path through ``jax.nn.dot_product_attention`` (``implementation="fused"``).
    head_params: the names of its learned per-head parameters.
    options: ``(name, default)`` of each option.
  """
  name: str
  paper: Optional[tuple]
  row_sums: str
  causal_safe: bool
  decodes: bool
  fast: bool
  fused: bool
  head_params: tuple
  options: tuple


def _probe_logits() -> jax.Array:
  """``[1 head, QUERIES, KEYS]`` logits: N(0, SPREAD^2) rows and a last row of LARGE ones."""
  logits = SPREAD * jax.random.normal(jax.random.key(0), (1, QUERIES, KEYS))
  return logits.at[:, -1, :].set(LARGE)


def row_sums(name: str) -> str:
  """How the rows of ``name``'s weights sum over the valid keys, at its initial per-head
  parameters and default options, on ``_probe_logits`` with the last ``MASKED`` keys masked.

  Args:
    name: a registered normalisation.

  Returns:
    "1", "at most 1", "signed" or "any" (see ``Properties.row_sums``).
  """
  norm = registry.get(name)
  mask = jnp.arange(KEYS) < KEYS - MASKED
  weights_of = jax.jit(lambda logits, params: norm.attention_weights(logits, mask, params))
  weights = np.asarray(weights_of(_probe_logits(), norm.initial_params(1)))
  sums = weights.sum(-1)
  if (weights < -TOLERANCE).any():
    return "signed"
  if np.allclose(sums, 1.0, atol=TOLERANCE):
    return "1"
  return "at most 1" if (sums <= 1.0 + TOLERANCE).all() else "any"


def properties(name: str) -> Properties:
  """The ``Properties`` of a registered normalisation.

  Args:
    name: a registered normalisation (``attention.names()``).

  Returns:
    Its ``Properties``.

  Raises:
    ValueError: for a name that is not registered.
  """
  norm = registry.get(name)
  return Properties(
      name=name, paper=norm.paper, row_sums=row_sums(name),
      causal_safe=norm.causal_safe, decodes=not norm.normalizes_over_queries,
      fast=norm.fast is not None, fused=norm.fused is not None, head_params=norm.param_names,
      options=tuple((o.name, o.default) for o in norm.options))


COLUMNS = ("normalisation", "paper", "rows sum to", "causal-safe", "decodes step by step",
           "fast path", "fused path", "learned per head", "options (default)")


def _row(p: Properties) -> list:
  """One row of ``table``'s cells."""
  yes = lambda flag: "yes" if flag else "no"
  code = lambda names: ", ".join(f"`{n}`" for n in names) or "-"
  paper = f"[{p.paper[0]}]({p.paper[1]})" if p.paper else "-"
  options = ", ".join(f"`{n}` ({default!r})" for n, default in p.options) or "-"
  return [f"`{p.name}`", paper, p.row_sums, yes(p.causal_safe), yes(p.decodes), yes(p.fast),
          yes(p.fused), code(p.head_params), options]


def table(names: Optional[Sequence[str]] = None) -> str:
  """A markdown table of the normalisations' ``Properties``, one row each.

  Args:
    names: registered normalisations; None: the built-ins (``BUILTIN_NORMALIZATIONS``).

  Returns:
    The table, lines joined by newlines, without a trailing newline.
  """
  names = registry.BUILTIN_NORMALIZATIONS if names is None else names
  lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
  lines += ["| " + " | ".join(_row(properties(name))) + " |" for name in names]
  return "\n".join(lines)


if __name__ == "__main__":
  print(table())
