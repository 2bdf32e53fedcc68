"""Orchestration: the `dpcompare` CLI, the grid runner, reports and presets."""
