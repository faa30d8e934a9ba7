"""Engines generate for local-model policies: `transformers` and `ct2` (CTranslate2), one protocol.

Only the protocol and its records are imported here; each engine imports its library when
it loads a model.
"""

from mleforge.policies.engines.base import ENGINE_CHOICES, ENGINES, Engine, Generation, Sample

__all__ = ["ENGINES", "ENGINE_CHOICES", "Engine", "Generation", "Sample"]
