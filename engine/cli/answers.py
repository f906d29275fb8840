"""`personal-llm ask`: grounded answers, streamed.

`ask` in a terminal writes the answer as the model streams it, then the numbered sources; notices go to
stderr. When the model fails after it was reached, the sources are still printed on stdout, then the
error on stderr, exit 1. Without a model at all the best passages are the answer: exit 0 and a note.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import Command, Handler, Session, add_json, print_json, short, visible

if TYPE_CHECKING:
    from ..ask import AskResult, Source


def _write(text: str) -> None:
    sys.stdout.write(visible(text))  # a model can repeat a control sequence a memory held
    sys.stdout.flush()


def _print_sources(sources: Sequence[Source]) -> None:
    if not sources:
        return
    lines = ["", "Sources:"]
    for s in sources:
        where = " · ".join(x for x in (s.document_title, s.locator) if x)
        lines.append(f"  [{s.n}] {s.id}  {s.kind}  " + (f"{where}: " if where else "") + (f"…{short(s.passage, 100)}" if s.passage else short(s.text, 100)))
        if s.conflict:
            lines.append(f"      conflict: {s.conflict}")
    _write("\n".join(lines) + "\n")


def _print_result(r: AskResult) -> None:
    _write("\n")
    _print_sources(r.sources)
    v = r.verification
    if v is not None:
        if not v.checked:
            print(f"note: {v.detail}", file=sys.stderr)
        elif v.supported:
            _write("\nVerified: every statement is supported by the sources.\n")
        else:
            _write("\nNot supported by the sources:\n" + "".join(f"  - {c}\n" for c in v.unsupported_claims))
    if r.notice:
        print(f"note: {r.notice}", file=sys.stderr)
    _write(f"\n(conversation {r.conversation_id}: continue it with --conversation {r.conversation_id})\n")


def ask(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("question")
    p.add_argument("--project", help="answer from this project's memories and documents only")
    p.add_argument("-k", "--k", type=int, default=8, help="how many passages to answer from (default 8)")
    p.add_argument("--verify", action="store_true", help="check the answer against its sources (a second call)")
    p.add_argument("--conversation", metavar="ID", help="continue a conversation (its id is printed after an answer)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..ask import AskFailed

        with session.open_engine() as eng:
            try:
                r = eng.ask(a.question, project=a.project, k=a.k, verify=a.verify,
                            conversation_id=a.conversation, on_token=None if a.json else _write)
            except AskFailed as e:
                if not a.json:  # the passages are still worth having; the error follows on stderr
                    _write("\n" if e.partial else "")
                    _print_sources(e.sources)
                raise
        if a.json:
            print_json(r)
        else:
            _print_result(r)
        return 0

    return run


COMMANDS = [
    Command("ask", "answer a question from memory, with numbered sources", ask),
]
