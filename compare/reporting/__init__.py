"""The parts of a report, one job per module (``compare.report`` holds the entry points).

A report is a pipeline: :mod:`.pipeline` builds the report data once (:mod:`.section`'s
``ReportData``) and applies its list of sections, each a pure function returning markdown,
CSV tables and drawn figures (:mod:`.section`); :mod:`.writer` writes them.

* :mod:`.frames`: stored RunResults as tables (one row per run, per class, per epoch);
* :mod:`.collapse`: the collapsed-run rule;
* :mod:`.stats`: intervals over seeds, the summary per setting and backend, paired backend
  comparisons, contrasts;
* :mod:`.published`: the papers' tables bundled in ``compare/published`` and the check of a
  grid's ``published:`` entries;
* :mod:`.attribution` (numbers), :mod:`.attribution_text` (the written conclusion): which
  difference between the libraries' stock recipes moves accuracy;
* :mod:`.headline`: the opening sentences generated from the numbers;
* :mod:`.plots`: the PNG figures, one panel per data set and grid axis;
* :mod:`.tables`: number formatting and Markdown tables;
* the sections, one module each: :mod:`.header_section`, :mod:`.headline` (headline),
  :mod:`.published_section`, :mod:`.findings_section`, :mod:`.privacy_section`,
  :mod:`.attribution_section` (with :mod:`.claims_section`), :mod:`.accuracy_section` (with
  :mod:`.ldp_eval`), :mod:`.backends_section`, :mod:`.curves_section`,
  :mod:`.epsilon_section`, :mod:`.faithfulness_section`, :mod:`.time_section`,
  :mod:`.per_class_section`, :mod:`.ldp_audit_section`, :mod:`.closing_section`.
"""
