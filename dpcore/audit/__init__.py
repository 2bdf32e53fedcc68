"""Empirical privacy auditing in one training run (Steinke, Nasr, Jagielski 2023).

* :mod:`.one_run`: the one-run p-value and the epsilon lower bound it gives (scipy);
* :mod:`.canaries`: the canaries of a run (which are in, their coordinates or images), the
  per-step canary gradient the backends add to the clipped sum, and the scores.
"""
