"""Imports every module that declares tables on ``leasehold.database.Base``.

Later features add their table modules here so ``init_database`` creates them.
"""

import leasehold.ci_environments
import leasehold.ci_heads
import leasehold.ci_plans
import leasehold.database
import leasehold.repos
import leasehold.secrets
import leasehold.video_deletions  # noqa: F401  (VideoDeletion)
