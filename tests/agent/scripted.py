"""A scripted policy for tests of the code around policies (the real ones are tested on their own)."""

from __future__ import annotations

from mleforge.policies.base import Completion

COPY_SAMPLE = '''Copy the sample submission: a valid baseline.
```python
import pandas as pd
sub = pd.read_csv("input/sample_submission.csv")
sub.to_csv("submission/submission.csv", index=False)
print("wrote", len(sub), "rows")
```'''

CRASH = '''Crash on purpose.
```python
import pandas as pd
train = pd.read_csv("input/train.csv")
raise ValueError("boom")
```'''


class ScriptedPolicy:
    model = "scripted"

    def __init__(self, texts, fail_at: int | None = None):
        self.texts = list(texts)
        self.calls = 0
        self.fail_at = fail_at
        self.states = []

    def generate(self, prompts, n=1, sampling=None, *, states=None):
        out = []
        for i, _ in enumerate(prompts):
            if self.fail_at is not None and self.calls == self.fail_at:
                raise KeyboardInterrupt("interrupted by the test")
            self.states.append(None if states is None else states[i])
            text = self.texts[self.calls % len(self.texts)]
            self.calls += 1
            out.append([Completion(text=text, finish_reason="stop", prompt_tokens=100, completion_tokens=10,
                                   latency_s=0.0, model=self.model) for _ in range(n)])
        return out

    def usage(self):
        return None

    def close(self):
        pass
