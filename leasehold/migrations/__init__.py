"""Alembic migrations of leasehold's SQL schema, shipped inside the package.

``leasehold.database.init_database`` runs them (``upgrade head``) on every start, so an
installed ``leasehold`` migrates its own database; the Alembic configuration is built in code
(``runner.py``) rather than read from an ``alembic.ini`` a wheel would not carry.
"""
