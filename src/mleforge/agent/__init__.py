"""The agent scaffold: records (Node, Journal, State), prompts, and parsing completions into actions.

Import from the submodules (`mleforge.agent.records`, `.actions`, `.prompts`);
this package imports nothing itself, so loading the records stays light.
"""
