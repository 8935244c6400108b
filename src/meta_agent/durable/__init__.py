"""Durable execution (DBOS, with PostgreSQL): a run that outlives its replica, its steps, and what it does when DBOS
lets it go no further."""
