"""Score finished sweeps again, no training: python experiments/resummarise.py results/<run> ...

Rewrites each run's summary.json and figures from its config.json and metrics.npz, e.g. after a
change in how results are scored.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from normattn_jax.train.sweep import best_lines, resummarise  # noqa: E402

if __name__ == "__main__":
  if len(sys.argv) < 2:
    sys.exit(__doc__.strip())
  for workdir in sys.argv[1:]:
    print(workdir)
    print("\n".join(best_lines(resummarise(workdir))))
