"""Imports every module that declares tables on ``leasehold.database.Base``.

Later features add their table modules here so ``init_database`` creates them.
"""

import leasehold.database
import leasehold.records.ci.environments
import leasehold.records.ci.heads
import leasehold.records.ci.plans
import leasehold.records.ci.repos
import leasehold.records.ci.secrets
import leasehold.records.video.deletions  # noqa: F401  (VideoDeletion)
