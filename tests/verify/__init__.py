"""Tests of ``dpcompare verify`` and the catalogue of implementation bugs."""
