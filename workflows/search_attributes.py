"""Typed search-attribute keys mirrored from workflow state.

The API lists and counts jobs and runs through them, and engineers filter by them in the
Temporal Web UI. ``ALL`` is what the embedded server and the test server register.
"""

from temporalio.common import SearchAttributeKey

# Shared by both products.
TENANT_ID = SearchAttributeKey.for_keyword("TenantId")
USER_ID = SearchAttributeKey.for_keyword("UserId")

# Video jobs.
JOB_STATE = SearchAttributeKey.for_keyword("JobState")
MODEL_VERSION = SearchAttributeKey.for_keyword("ModelVersion")
TIER = SearchAttributeKey.for_keyword("Tier")

# CI runs.
REPO_ID = SearchAttributeKey.for_keyword("RepoId")
COMMIT_SHA = SearchAttributeKey.for_keyword("CommitSha")
RUN_STATE = SearchAttributeKey.for_keyword("RunState")

ALL: tuple[SearchAttributeKey, ...] = (
    TENANT_ID,
    USER_ID,
    JOB_STATE,
    MODEL_VERSION,
    TIER,
    REPO_ID,
    COMMIT_SHA,
    RUN_STATE,
)
