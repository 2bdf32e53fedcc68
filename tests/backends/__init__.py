"""Tests of the two backends (tfpipe, torchpipe) and their equivalence."""
