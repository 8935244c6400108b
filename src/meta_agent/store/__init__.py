"""The state the replicas share, in SQLite or PostgreSQL: the database and its migrations, conversations, the run
index, parked rounds; and the trust levels a user recorded."""
