"""awarl: Abstention-Aware Reinforcement Learning for LLM search agents."""

__version__ = "0.1.0"
