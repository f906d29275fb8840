"""The SQLite backend: the encrypted SQLCipher file of a desktop profile (see docs/architecture.md).

`db.py` (connections, transactions, error mapping), `migrations.py` (the schema), `vectors.py` (the vector
tables and their mirror), `retrieval.py` (the FTS5 queries of recall) and one row module per part
(`memories.py`, `documents.py`, …): a part decides what happens; its row module here says how rows are read
and written in SQLite.
"""
