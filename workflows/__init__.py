"""Deterministic orchestration and the typed payloads it shares with activities and the API.

Modules here import only the standard library, pydantic and temporalio, so the API and the
orchestration worker can load them without torch, PyAV, boto3 or subprocess code.
"""
