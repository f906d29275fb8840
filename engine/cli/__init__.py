"""`personal-llm`: the command line. Commands are grouped like the engine's parts (memories, retrieval,
documents, answers, graph, consolidation, transfer), plus the store as a whole, settings and interfaces;
`root.py` is the one composition root. Every command module lists its commands in `COMMANDS`."""

from .root import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
