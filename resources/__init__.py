"""Files the running app loads: icons, themes and prompt templates."""
