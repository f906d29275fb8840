"""The module Briefcase starts (`python -m personal_llm`): dispatches to the desktop app or the CLI."""
