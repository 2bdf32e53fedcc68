"""Performance benchmarks of the two backends (``dpcompare bench``)."""
