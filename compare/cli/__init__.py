"""The `dpcompare` command line: one module per subcommand (see :mod:`compare.cli.main`)."""
