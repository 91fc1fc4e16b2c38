"""Imports every module that declares tables on ``leasehold.database.Base``.

Later features add their table modules here so ``init_database`` creates them.
"""

import leasehold.ci_plans  # noqa: F401  (CITenantPlan)
import leasehold.database  # noqa: F401  (ApiKey)
import leasehold.repos  # noqa: F401  (Repository)
import leasehold.secrets  # noqa: F401  (CISecret)
import leasehold.video_deletions  # noqa: F401  (VideoDeletion)
