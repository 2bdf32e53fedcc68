"""The parts of a report, one job per module (``compare.report`` puts them together).

* :mod:`.frames`: stored RunResults as tables (one row per run, per class, per epoch);
* :mod:`.collapse`: the collapsed-run rule;
* :mod:`.stats`: means with t intervals over seeds, paired backend comparisons;
* :mod:`.published`: the papers' tables bundled in ``compare/published`` and the check of a
  grid's ``published:`` entries; :mod:`.published_section` renders "Published vs ours";
* :mod:`.headline`: the opening sentences generated from the numbers;
* :mod:`.plots`: the PNG figures, one panel per data set and grid axis;
* :mod:`.tables`: number formatting and Markdown tables.
"""
