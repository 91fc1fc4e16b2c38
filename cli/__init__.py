"""The ``leasehold`` command: the embedded stack, single processes, and admin commands."""
