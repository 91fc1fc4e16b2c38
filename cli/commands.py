"""Feature subcommands register themselves on ``cli.main.EXTRA_COMMANDS`` when imported here."""

import cli.environments
import cli.plans
import cli.repos
import cli.secrets  # noqa: F401  (leasehold secrets ...)
