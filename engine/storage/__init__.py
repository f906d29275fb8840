"""The storage seam: the modules that speak SQL to the store, one per part (see docs/architecture.md).

A part (engine/memories.py, …) decides what happens; its storage module here says how rows are read and
written in SQLite. Together with engine/db.py (connections, transactions, error mapping),
engine/migrations.py (the schema), engine/vectors.py (vector tables and their mirror) and
engine/retrieval.py (the FTS5 queries of recall), these are the only modules that hold SQL.
"""
