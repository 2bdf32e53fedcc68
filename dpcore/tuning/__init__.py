"""Private hyper-parameter selection with a proved cost (Papernot & Steinke 2022).

* :mod:`dpcore.tuning.laws`: the law of the random number of repetitions K.
* :mod:`dpcore.tuning.bound`: the selection's RDP and (epsilon, delta) from one repetition's
  RDP curve (training composed with a Gaussian-noised validation score), the plain
  composition of a full grid, and the per-run budget calibrated to a total.
* :mod:`dpcore.tuning.protocol`: the seeded draws (K, the candidates, the score noises) and
  the winner on the noised scores.
* :mod:`dpcore.tuning.selection`: a preset's ``selection:`` block (accounted or not).
"""

from dpcore.tuning.bound import (
    CandidateSteps,
    ScoreMechanism,
    SelectionBudget,
    accuracy_sensitivity,
    auc_sensitivity,
    calibrate_selection,
    full_grid_epsilon,
    selection_curve,
    selection_epsilon,
)
from dpcore.tuning.laws import RepetitionLaw, parse_law
from dpcore.tuning.protocol import SelectionDraws, winner
from dpcore.tuning.selection import (
    PROTOCOL_CITATION,
    Selection,
    parse_selection,
    parse_selections,
    selection_for,
)

__all__ = [
    "PROTOCOL_CITATION", "CandidateSteps", "RepetitionLaw", "ScoreMechanism", "Selection",
    "SelectionBudget", "SelectionDraws", "accuracy_sensitivity", "auc_sensitivity",
    "calibrate_selection", "full_grid_epsilon", "parse_law", "parse_selection",
    "parse_selections", "selection_curve", "selection_epsilon", "selection_for", "winner",
]
