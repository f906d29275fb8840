"""The PostgreSQL backend: one database serving many users, each row a user's, kept apart by row-level
security (docs/server.md). `migrations` is the schema, `database` the pool and the operator's operations."""
