"""The README's Python examples run as written."""
import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(README).read(), flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index):
  assert BLOCKS, "the README has no Python example"
  exec(compile(BLOCKS[index], f"README block {index}", "exec"), {})
