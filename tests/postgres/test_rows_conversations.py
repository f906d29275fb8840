"""The PostgreSQL backend's conversation rows (engine/store/postgres/conversations.py) mean what the SQLite
backend's mean: one scenario of calls through the storage interface, on an encrypted SQLite store and on a
user of a PostgreSQL database, gives the same answers (ids aside); an answer's sources are indexed, so
forgetting a source deletes the answers that cite it; another user's conversations are out of reach."""

from __future__ import annotations

import psycopg
import pytest

from engine import store
from engine.errors import NotFound
from engine.store.postgres.database import Database
from tests.postgres.rows import Both, two_users


def scenario(con) -> list:
    c = store.conversations
    out: list = []
    trip = c.start(con, "cnv_trip", "Where did Alice go?", "travel", 10.0, 11.0)
    c.add_exchange(con, trip, "Where did Alice go?", 10.0, "To Porto, by train.", 12.0,
                   {"sources": ["mem_porto", "chk_ticket_0"], "grounded": True})
    c.add_exchange(con, trip, "And back?", 13.0, "Nothing says.", 14.0, {"sources": [], "grounded": False})
    c.add_exchange(con, trip, "When?", 15.0, "In May.", 16.0, {"sources": ["mem_may"]})
    out.append(c.row_id(con, "cnv_trip") == trip)
    with pytest.raises(NotFound, match="No conversation with id cnv_none"):
        c.row_id(con, "cnv_none")
    out.append(c.last_messages(con, trip, 3))
    out.append(c.last_messages(con, trip, 100))
    out.append(c.last_messages(con, trip, 0))
    out.append(con.execute("SELECT title, project, created_at, updated_at FROM conversations WHERE id = "
                           + ("?" if store.backend_of(con) == "engine.store.sqlite" else "%s"), (trip,)).fetchone())

    # imported from a chat export: found again by its source's id, its messages by theirs
    out.append(c.imported(con, "chatgpt", "abc-1"))
    chat = c.start_imported(con, "cnv_chat", "Garden", None, 100.0, 200.0,
                            {"import": {"source": "chatgpt", "id": "abc-1"}})
    out.append(c.imported(con, "chatgpt", "abc-1") == (chat, "cnv_chat"))
    out.append((c.imported(con, "claude", "abc-1"), c.imported(con, "chatgpt", "abc-2")))
    out.append(c.imported_message_ids(con, chat))
    c.add_imported_messages(con, chat, [("user", "Tomatoes need sun?", 150.0, "m1"),
                                        ("assistant", "Six hours a day.", 151.0, "m2")], 190.0)
    out.append((c.imported_message_ids(con, chat), c.last_messages(con, chat, 5)))
    c.add_imported_messages(con, chat, [("user", "And water?", 250.0, "m3")], 260.0)
    c.add_imported_messages(con, chat, [], 255.0)  # updated_at only moves forward
    out.append((c.imported_message_ids(con, chat), c.last_messages(con, chat, 1)))
    out.append(c.imported_message_ids(con, trip))  # asked here: no source ids

    # forgetting a source deletes the answers citing it (the question stays)
    out.append(store.memories.scrub_transcripts(con, ["chk_ticket_0", "mem_nothing"]))
    out.append(c.last_messages(con, trip, 10))
    out.append(store.memories.scrub_transcripts(con, ["mem_may", "mem_porto"]))
    out.append(c.last_messages(con, trip, 10))
    return out


def test_the_same_calls_give_the_same_answers_on_both_backends(both: Both):
    on_sqlite = both.run(scenario)
    with both.db.transaction(both.alice) as con:
        (updated,) = con.execute("SELECT updated_at FROM conversations WHERE uid = 'cnv_chat'").fetchone()
    assert updated == 260.0
    assert on_sqlite[1] == [("assistant", "Nothing says."), ("user", "When?"), ("assistant", "In May.")]
    assert on_sqlite[-4] == 1 and on_sqlite[-2] == 1
    assert on_sqlite[-1] == [("user", "Where did Alice go?"), ("user", "And back?"), ("assistant", "Nothing says."),
                             ("user", "When?")]


def test_another_users_conversations_are_out_of_reach(pg_db: Database):
    alice, bob = two_users(pg_db)
    c = store.conversations
    with pg_db.transaction(alice) as con:
        trip = c.start(con, "cnv_trip", "Where?", None, 1.0, 1.0)
        c.add_exchange(con, trip, "Where?", 1.0, "Porto.", 2.0, {"sources": ["mem_porto"]})
        chat = c.start_imported(con, "cnv_chat", "Garden", None, 1.0, 1.0, {"import": {"source": "claude", "id": "x"}})
        c.add_imported_messages(con, chat, [("user", "Tomatoes?", 1.0, "m1")], 1.0)
    with pg_db.transaction(bob) as con:
        with pytest.raises(NotFound):
            c.row_id(con, "cnv_trip")
        assert c.last_messages(con, trip, 10) == [] and c.imported(con, "claude", "x") is None
        assert c.imported_message_ids(con, chat) == set()
        assert store.memories.scrub_transcripts(con, ["mem_porto"]) == 0  # his forget cannot reach her answers
        for write in (lambda: c.add_exchange(con, trip, "Mine?", 3.0, "Yes.", 3.0, {}),
                      lambda: c.add_imported_messages(con, chat, [("user", "Mine?", 3.0, "m2")], 3.0)):
            with pytest.raises(NotFound):
                write()
        mine = c.start(con, "cnv_trip", "Bob's own", None, 1.0, 1.0)  # the same uid, his own row
        assert c.row_id(con, "cnv_trip") == mine != trip
    with pg_db.transaction(bob) as con, pytest.raises(psycopg.errors.ForeignKeyViolation):
        con.execute("INSERT INTO messages(conversation_id, role, content, created_at) VALUES (%s, 'user', 'x', 1)",
                    (trip,))
    with pg_db.transaction(alice) as con:
        assert c.row_id(con, "cnv_trip") == trip
        assert c.last_messages(con, trip, 10) == [("user", "Where?"), ("assistant", "Porto.")]
        assert c.imported_message_ids(con, chat) == {"m1"}
        assert con.execute("SELECT updated_at FROM conversations WHERE id = %s", (chat,)).fetchone() == (1.0,)
