"""End-to-end walkthroughs: a user's command or a checklist followed through every layer,
faults injected on the way (killed grids, full disks, bad input); each test runs with its own
data cache and no inherited data root (conftest.py)."""
