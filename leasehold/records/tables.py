"""Every module that declares tables on ``leasehold.records.base.Base``, listed once.

``init_database`` and the migrations' environment import this module, so a new table module is
added here, and its tables get a revision in ``leasehold/migrations/versions`` (a test compares
the models with the migrated schema). The direction is one way: the database module imports
this one, never the reverse.
"""

# Imported for what importing does: each module declares its tables on Base.
from leasehold.records import api_keys  # noqa: F401
from leasehold.records.ci import (  # noqa: F401
    artifacts,
    environments,
    heads,
    plans,
    repos,
    run_numbers,
    runs,
    secrets,
    status_reporters,
    variables,
)
from leasehold.records.video import capacity, deletions, jobs, webhooks  # noqa: F401
