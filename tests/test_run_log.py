"""The run log's progress bar where stderr is a log file rather than a terminal."""
import io
import sys

from normattn_jax.train.run_log import RunLog


def test_a_progress_bar_off_a_terminal_writes_lines(tmp_path, monkeypatch):
  """A redirected log gets the bar as lines of its own, not carriage returns over one line."""
  stream = io.StringIO()
  monkeypatch.setattr(sys, "stderr", stream)
  with RunLog(str(tmp_path), total=4, tensorboard=False) as log:
    for _ in range(4):
      log.advance(1)
  lines = stream.getvalue().splitlines()
  assert "\r" not in stream.getvalue() and len(lines) >= 2
  assert lines[0].startswith("  0%|") and lines[-1].startswith("100%|##########| 4/4 ")
