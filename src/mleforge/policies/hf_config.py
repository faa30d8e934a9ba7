"""Which local transformers model a policy runs, and how: `HFConfig`, checked when it is made.

It sits below the policy and its engines, which all read it; nothing heavy is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mleforge.policies.base import SamplingConfig
from mleforge.policies.engines.base import ENGINE_CHOICES, QUANTIZATIONS

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class HFConfig:
    """Which model and how to run it.

    `model` is a local folder or a hub id; a hub id must already be in the local Hugging Face
    cache unless `download=True` (many machines that train have no hub access). `device` "auto"
    takes a GPU when there is one. `engine` picks what generates (see the module docstring).
    For the transformers engine, `dtype` "auto" is bfloat16 on a GPU that supports it and
    float32 on a CPU (without AVX-512 BF16, CPU matmuls in bfloat16 run several times slower).
    For ct2, `quantization` is the converted weights' type (None: int8 on a CPU, float16 on a
    GPU) and `ct2_cache` the folder conversions are cached in (None: `<models root>/ct2`).
    `max_batch_size` bounds the sequences (prompts x samples) generated together, and so memory.
    `num_threads` is the CPU threads the engine generates with (torch's, restored after; or
    ctranslate2's); on a CPU shared with other work, 1 thread can be several times faster than
    one per core, whose threads wait on each other whenever one is preempted.
    """

    model: str
    adapter: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    engine: str = "transformers"
    quantization: str | None = None
    ct2_cache: str | None = None
    max_batch_size: int = 16
    num_threads: int | None = None
    download: bool = False
    trust_remote_code: bool = False
    name: str = ""  # reported as Completion.model; defaults to `model`
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a local folder or a hub id")
        if self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES} (or cuda:<index>), got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.engine not in ENGINE_CHOICES:
            raise ValueError(f"engine must be one of {ENGINE_CHOICES}, got {self.engine!r}")
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS} (or None for the "
                             f"device's default), got {self.quantization!r}")
        if self.quantization is not None and self.engine == "transformers":
            raise ValueError("quantization applies to the ct2 engine; the transformers engine "
                             "takes dtype (or pass engine='ct2' or 'auto')")
        if isinstance(self.max_batch_size, bool) or not isinstance(self.max_batch_size, int) \
                or self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive integer, got {self.max_batch_size!r}")
        if self.num_threads is not None and (not isinstance(self.num_threads, int)
                                             or self.num_threads < 1):
            raise ValueError(f"num_threads must be a positive integer or None, got {self.num_threads!r}")
        if isinstance(self.sampling, Mapping):
            object.__setattr__(self, "sampling", SamplingConfig.from_dict(self.sampling))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sampling"] = self.sampling.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HFConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
