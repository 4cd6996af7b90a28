"""The README's Python examples run as written."""
import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(README).read(), flags=re.S)


def test_readme_shows_the_public_api_in_examples():
  """The examples this file runs are the ones users copy: the weight functions, the module, a
  grid, a registered normalisation and a registered task."""
  text = "\n".join(BLOCKS)
  for name in ("dnas_weights", "MultiHeadAttention", "register", "tasks"):
    assert name in text, f"no README example uses {name}"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index):
  exec(compile(BLOCKS[index], f"README block {index}", "exec"), {})
