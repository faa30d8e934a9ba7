"""Tasks: competition-like ML problems, their data and their registry."""
