"""The ``hedwig`` command: one module per group of subcommands."""
