"""Typed payloads of CI, one module per sub-domain: ``spec`` (parsed workflow files), ``push``
(a push and its listing), ``run`` (a run's input, state and Updates), ``job`` (one job attempt
and its fencing), ``semaphore`` (the per-tenant cap) and ``reconcile`` (lost webhooks).

Light on purpose (stdlib + pydantic): the API, the orchestration worker (inside the workflow
sandbox) and the CI worker all import them. Fields are only ever added, with defaults, so old
histories still decode.

Vocabulary: a *push* (repo + commit + ref) creates one *run* per triggered workflow file; a run
has *jobs* (the ``jobs:`` of the file); a job is executed by *attempts*.
"""
