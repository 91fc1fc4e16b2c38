"""Feature subcommands register themselves on ``cli.main.EXTRA_COMMANDS`` when imported here."""
