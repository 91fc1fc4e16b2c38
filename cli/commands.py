"""Feature subcommands register themselves on ``cli.main.EXTRA_COMMANDS`` when imported here."""
import cli.repos  # noqa: F401  (leasehold repos ...)
import cli.secrets  # noqa: F401  (leasehold secrets ...)
import cli.plans  # noqa: F401  (leasehold plans ...)
