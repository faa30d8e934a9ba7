"""mleforge: train LLM agents to do machine-learning engineering with RL."""

__version__ = "0.1.0"
