"""The parts of a report, one job per module (``compare.report`` puts them together).

* :mod:`.frames`: stored RunResults as tables (one row per run, per class, per epoch);
* :mod:`.collapse`: the collapsed-run rule;
* :mod:`.stats`: means with t intervals over seeds, paired backend comparisons;
* :mod:`.published`: the papers' tables bundled in ``compare/published`` and the check of a
  grid's ``published:`` entries; :mod:`.published_section` renders "Published vs ours";
* :mod:`.findings_section`: what the bench found about a paper's table (``findings:`` in
  the bundled paper file), e.g. the IMDB epsilons no accountant input reproduces;
* :mod:`.attribution` (numbers), :mod:`.attribution_text` (the written conclusion) and
  :mod:`.attribution_section` (table, chart): which difference between the libraries' stock
  recipes moves accuracy, for runs with a recipe / factor axis;
* :mod:`.claims_section`: the settings whose epsilon is "claimed, not proved";
* :mod:`.headline`: the opening sentences generated from the numbers;
* :mod:`.plots`: the PNG figures, one panel per data set and grid axis;
* :mod:`.tables`: number formatting and Markdown tables.
"""
