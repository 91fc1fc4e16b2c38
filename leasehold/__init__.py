"""Shared infrastructure every process may import: settings, object store, database, ids.

Nothing here imports a composition root (``api``, ``worker_gpu``, ``worker_ci``,
``orchestrator``, ``cli``), and nothing here imports torch, PyAV or subprocess code.
"""
