"""Empirical privacy auditing in one training run (Steinke, Nasr, Jagielski 2023).

* :mod:`.one_run`: the one-run p-value and the epsilon lower bound it gives (scipy);
* :mod:`.canaries`: the canaries of a run (which are in, their coordinates or images), the
  records of each step's sampled gradient canaries, and the scores;
* :mod:`.canary_records`: a gradient canary as a per-example record a backend's own clipping
  takes (its gradient, and its rows of a layer's activations and output gradients);
* :mod:`.per_step`: the per-step audit of the noised sums the engine reports at the canaries'
  coordinates (is the noise fresh at every step?);
* :mod:`.gradient_run`: a run's gradient canaries and their audit record, for either recipe;
* :mod:`.faults`: deliberately broken steps (``factors.fault``), for audit checks;
* :mod:`.plan`: the checks of a run's audit that need its data set.
"""
