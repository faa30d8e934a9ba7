"""The agent scaffold: records (Node, Journal, State: one module each), prompts, and parsing completions into actions.

Import from the submodules (`mleforge.agent.state`, `.journal`, `.node`, `.actions`, `.prompts`);
this package imports nothing itself, so loading the records stays light.
"""
