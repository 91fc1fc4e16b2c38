"""The version of the workflow code: the build id its workers run under (``docs/versioning.md``).

Bump ``BUILD_ID`` whenever a change alters the commands a workflow issues for the same inputs
(a new activity, a timer, a signal sent, an order changed): executions started on the previous
build stay pinned to its workers, new ones start on this build, and no ``workflow.patched``
branch is needed. The replay tests replay the histories recorded for this build id
(``tests/*/histories/<BUILD_ID>/``), so a command change without a bump fails them.
"""

from __future__ import annotations

BUILD_ID = "1.2.0"
