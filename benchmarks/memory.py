"""Peak resident memory of each phase of the main job (`mleforge train`, cpu preset), in isolation.

    python benchmarks/memory.py --out bench-out/memory.json                 # every phase
    python benchmarks/memory.py --phases load,rollout_engine --out ...      # some of them
    python benchmarks/memory.py --main-job --out ...                       # + the whole main job
    python benchmarks/memory.py --phases imports --main-job --baseline-src ../old/src --pairs 2 --out ...
                                               # the main job against an earlier mleforge, paired

Each phase runs in a fresh Python process (`--phase NAME`, the same script); this process
samples the resident set (RSS) of that process and of all its descendants every 50 ms and
records the peak of the tree's sum (shared copy-on-write pages counted once per process, as
a laptop's memory pressure sees them only approximately: an upper bound), the peak of the
phase's own process, its ru_maxrss (the kernel's own peak of the biggest process, what
`/usr/bin/time -v` reports as "Maximum resident set size"), and its wall time.

Phases (the model is `--model`, the cpu preset's bundled Qwen2.5-Coder-0.5B by default):

    imports          torch, transformers, trl, peft, ctranslate2 and mleforge's trainer imported
    gguf_convert     a fresh clone's first use of the bundled model: its GGUF dequantized by transformers
                     and saved as the float32 transformers folder every later load reads (into a temp root)
    load             the training model as `mleforge train` loads it (float32 on a CPU) with LoRA
    rollout_engine   load, then the GRPO rollouts' ct2 engine built from it at the training weights'
                     type (the first sync) and synced once more (every later step's sync)
    rollout_generate load, the rollouts' engine, then one step's rollouts `--repeats` times: one group
                     (`--prompt-tokens` random tokens, the cpu preset's group size and completion cap,
                     a sampling seed each), each one's peak above the resident set before it. ctranslate2
                     prefills the prompt once and then copies its keys and values to every sample (for a
                     grouped-query model such as Qwen2, copied out to every query head): this is the
                     part of the main job's peak that grows with the prompt and the group
    eval_conversion  the step-wise evaluation's ct2 conversion (int8) of the model, into an empty
                     cache (what the evaluations after SFT and after GRPO do for their new weights)
    eval_policy      the step-wise evaluation's policy loaded from that conversion (cached)
    grpo_step        load, then one GRPO update of a micro-batch as the cpu preset makes it (one group:
                     `--prompt-tokens` shared, completions of up to max_new_tokens) through the
                     trainer's path (mleforge.train.grpo.trainer.completion_logps and a backward)
    grpo_step_paired the same update through the trainer's path ("new") and through the path before
                     its lean parts ("old": the full logits, the key/value heads repeated, the MLP's
                     SiLU kept; `--old-without` turns off only the parts it names),
                     alternated `--repeats` times in one process: each one's seconds and its peak
                     above the process's resident set before it (sampled here, every 10 ms)
    grpo             `mleforge train` with no warm start and no step-wise evaluation: GRPO alone
                     (`--steps` steps: the trainer, its optimizer, the rollout engine, the pool)
    sft              `mleforge train --sft auto` without the step-wise evaluation, one GRPO step:
                     the template expert's collection, the SFT warm start, then the GRPO set-up
    main_job         `mleforge train` itself (`--main-job`; its own run directory in a temp folder), with
                     the peak of its process while each of its parts ran (PHASE_HOOKS: the evaluations,
                     the collection, the warm start, a GRPO step's rollout, sync, generation, loss and
                     backward), sampled every 10 ms on a thread of the run's own process. A sample
                     counts for every part running at that moment (the evaluation before training
                     runs beside the collection), so the parts overlap and nest

`--baseline-src DIR` (a checkout's src/ folder, say a git worktree of an earlier commit) runs the
main job `--pairs` times with that mleforge on PYTHONPATH and as often with this one, alternated
(baseline first in even pairs, this code first in odd ones), one after the other on the same
machine, and adds a table of each part's peak, the max RSS, the peak of anonymous memory and the
run's seconds: each side's mean and the mean paired difference (this code − baseline) with its
standard error where there are two pairs or more.

Writes JSON to --out (benchmarks/_record.py's convention) and prints a table.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import print_table, table, write_result  # noqa: E402

PHASES = ("imports", "gguf_convert", "load", "rollout_engine", "rollout_generate", "eval_conversion", "eval_policy",
          "grpo_step", "grpo_step_paired", "grpo", "sft")
MIB = 2**20
SAMPLE_S = 0.05


# --- the phases, each run in a process of its own -------------------------------------------------


def _rss_mib() -> float:
    import psutil

    return round(psutil.Process().memory_info().rss / MIB, 1)


def phase_imports(args: argparse.Namespace, marks: dict[str, float]) -> None:
    import ctranslate2  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401

    import mleforge.train.grpo.training  # noqa: F401


def phase_gguf_convert(args: argparse.Namespace, marks: dict[str, float]) -> None:
    from mleforge.policies.bundled import convert, get_bundled
    from mleforge.policies.model_source import split_spec

    kind, name = split_spec(args.model)
    if kind != "bundled":
        raise SystemExit(f"gguf_convert: --model {args.model} is not a bundled:NAME model")
    with tempfile.TemporaryDirectory(prefix="mleforge-memory-gguf-") as root:
        started = time.perf_counter()
        convert(get_bundled(name), Path(root))
        marks["convert_s"] = round(time.perf_counter() - started, 2)
        marks["after_mib"] = _rss_mib()


def _load(args: argparse.Namespace) -> Any:
    import peft

    from mleforge.train.config import ModelConfig
    from mleforge.train.model import load_for_training

    loaded = load_for_training(ModelConfig(spec=args.model, threads=args.threads))
    return peft.get_peft_model(loaded.model, loaded.peft_config), loaded.tokenizer


def phase_load(args: argparse.Namespace, marks: dict[str, float]) -> None:
    model, _ = _load(args)
    marks["loaded_mib"] = _rss_mib()


def phase_rollout_engine(args: argparse.Namespace, marks: dict[str, float]) -> None:
    from mleforge.policies.engines.ct2 import refresh_engine

    model, tokenizer = _load(args)
    marks["loaded_mib"] = _rss_mib()
    with tempfile.TemporaryDirectory(prefix="mleforge-memory-") as scratch:
        engine, report = refresh_engine(model, tokenizer, quantization="float32", device="cpu",
                                        num_threads=args.threads, temp_root=scratch)
        gc.collect()
        marks["engine_built_mib"] = _rss_mib()
        marks["first_sync_s"] = round(report.convert_s + report.load_s, 2)
        _, report = refresh_engine(model, tokenizer, engine)
        gc.collect()
        marks["engine_synced_mib"] = _rss_mib()
        marks["sync_s"] = round(report.convert_s + report.load_s, 2)
        engine.close()


def phase_rollout_generate(args: argparse.Namespace, marks: dict[str, float]) -> None:
    import statistics

    import torch

    from mleforge.policies.base import SamplingConfig
    from mleforge.policies.engines.ct2 import refresh_engine
    from mleforge.train.config import TrainConfig
    from mleforge.utils.memory import release_memory

    preset = TrainConfig.preset_config("cpu")
    model, tokenizer = _load(args)
    prompt = torch.randint(100, len(tokenizer) - 100, (args.prompt_tokens,),  # ids the tokenizer has
                           generator=torch.Generator().manual_seed(0)).tolist()
    sampling = SamplingConfig(temperature=preset.temperature, top_p=preset.top_p,
                              max_new_tokens=preset.max_new_tokens, seed=None)
    watch = _PeakWatch()
    peaks, seconds, tokens = [], [], []
    with tempfile.TemporaryDirectory(prefix="mleforge-memory-") as scratch:
        engine, _ = refresh_engine(model, tokenizer, quantization="float32", device="cpu",
                                   num_threads=args.threads, temp_root=scratch)
        release_memory()
        marks["engine_built_mib"] = _rss_mib()
        for seed in range(args.repeats):
            release_memory()
            start = watch.reset()
            started = time.perf_counter()
            made = engine.generate([prompt], preset.group_size, sampling, seed)
            seconds.append(time.perf_counter() - started)
            peaks.append((watch.peak - start) / MIB)
            tokens.append(sum(len(s.token_ids) for s in made.samples[0]))
        engine.close()
    marks.update(group=preset.group_size, prompt_tokens=args.prompt_tokens, max_new_tokens=preset.max_new_tokens,
                 generate_peak_mib=round(max(peaks)), generate_peak_min_mib=round(min(peaks)),
                 generate_s=round(statistics.mean(seconds), 2), new_tokens=round(statistics.mean(tokens)))


def _eval_config(args: argparse.Namespace, cache: str) -> Any:
    from mleforge.policies.hf_config import HFConfig
    from mleforge.policies.model_source import resolve_model

    source = resolve_model(args.model)
    return HFConfig(model=source.base, ct2_cache=cache)


def phase_eval_conversion(args: argparse.Namespace, marks: dict[str, float]) -> None:
    from mleforge.policies.engines.ct2_convert import cached_conversion

    with tempfile.TemporaryDirectory(prefix="mleforge-memory-ct2-") as cache:
        started = time.perf_counter()
        cached_conversion(_eval_config(args, cache), "int8")
        marks["convert_s"] = round(time.perf_counter() - started, 2)
        gc.collect()
        marks["after_mib"] = _rss_mib()


def phase_eval_policy(args: argparse.Namespace, marks: dict[str, float]) -> None:
    from mleforge.eval.stages import make_local_policy

    policy = make_local_policy(args.model, {"engine": "ct2", **({"num_threads": args.threads} if args.threads else {})})
    marks["loaded_mib"] = _rss_mib()
    policy.close()


class _PeakWatch:
    """This process's RSS sampled every 10 ms on a thread: `reset()` starts a new peak."""

    def __init__(self) -> None:
        import threading

        import psutil

        self.process = psutil.Process()
        self.lock = threading.Lock()  # a sample taken before a reset must not land after it
        self.peak = self.process.memory_info().rss
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            with self.lock:
                self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.01)

    def reset(self) -> int:
        """The RSS now, which the next peak starts from."""
        with self.lock:
            self.peak = self.process.memory_info().rss
            return self.peak


def _update_batch(args: argparse.Namespace, vocab: int) -> tuple[Any, Any, int, Any]:
    """One group of the cpu preset: (ids, mask, completion length, advantages); its prompt of
    `--prompt-tokens` random tokens, left as TRL lays it out, its completions right-padded to the
    longest (max_new_tokens) and of lengths falling to a third of it."""
    import torch

    from mleforge.train.config import TrainConfig

    config = TrainConfig()
    group, keep = config.group_size, config.max_new_tokens
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, vocab - 100, (args.prompt_tokens,), generator=generator)
    ids = torch.cat([prompt.expand(group, -1), torch.randint(100, vocab - 100, (group, keep), generator=generator)], 1)
    mask = torch.ones_like(ids)
    for row in range(group):
        mask[row, args.prompt_tokens + keep - row * keep // (group + 2):] = 0
    advantages = torch.linspace(1.0, -1.0, group)
    return ids.masked_fill(mask == 0, 0), mask, keep, advantages


def _update(model: Any, batch: tuple[Any, Any, int, Any], **paths: Any) -> tuple[float, Any]:
    """A GRPO update of `batch` as the cpu preset's trainer runs it (prompt_grad off, the entropy
    logged without a gradient) and its policy-gradient loss at ratio 1 (TRL's loss's gradient
    there): its seconds and the log-probabilities."""
    from mleforge.train.config import TrainConfig
    from mleforge.train.grpo.trainer import completion_logps

    config = TrainConfig()
    ids, mask, keep, advantages = batch
    started = time.perf_counter()
    logps, entropy, _ = completion_logps(model, ids, mask, keep, batch_size=None, compute_entropy=True,
                                         temperature=config.temperature, entropy_requires_grad=False,
                                         prompt_grad=config.model.prompt_grad, **paths)
    kept = mask[:, -keep:]
    loss = -(logps * advantages[:, None] * kept).sum() / kept.sum()
    loss.backward()
    float((entropy * kept).sum() / kept.sum())  # as TRL logs it
    seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return seconds, logps.detach()


def _touch_weights(model: Any) -> None:
    """A short forward without a graph: every weight resident, as a run's model is by its first update."""
    import torch

    with torch.no_grad():
        model(input_ids=torch.ones((1, 8), dtype=torch.long))


def phase_grpo_step(args: argparse.Namespace, marks: dict[str, float]) -> None:
    from mleforge.utils.memory import release_memory

    model, _ = _load(args)
    model.train()
    _touch_weights(model)
    batch = _update_batch(args, model.get_output_embeddings().weight.size(0))
    release_memory()
    marks["loaded_mib"] = _rss_mib()
    seconds = [_update(model, batch)[0] for _ in range(args.repeats)]
    marks["update_s"] = round(min(seconds), 2)


LEAN_PARTS = ("chunked_head", "kv_heads", "gated_mlp")  # completion_logps' switches of the lean path


def phase_grpo_step_paired(args: argparse.Namespace, marks: dict[str, float]) -> None:
    import statistics

    from mleforge.utils.memory import release_memory

    model, _ = _load(args)
    model.train()
    _touch_weights(model)
    batch = _update_batch(args, model.get_output_embeddings().weight.size(0))
    watch = _PeakWatch()
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    peaks: dict[str, float] = {"old": 0.0, "new": 0.0}
    logps: dict[str, Any] = {}
    for repeat in range(args.repeats):
        for name in (("old", "new") if repeat % 2 == 0 else ("new", "old")):  # ABBA: drift cancels
            release_memory()
            start = watch.reset()
            took, logps[name] = _update(model, batch, **({part: False for part in args.old_without}
                                                         if name == "old" else {}))
            seconds[name].append(took)
            peaks[name] = max(peaks[name], (watch.peak - start) / MIB)
    diffs = [new - old for new, old in zip(seconds["new"], seconds["old"])]
    marks.update({f"{name}_s": round(statistics.mean(values), 2) for name, values in seconds.items()})
    marks["new_minus_old_s"] = round(statistics.mean(diffs), 2)
    marks["se_s"] = round(statistics.stdev(diffs) / len(diffs) ** 0.5, 2) if len(diffs) > 1 else float("nan")
    marks.update({f"{name}_peak_mib": round(peak) for name, peak in peaks.items()})
    marks["max_abs_logp_diff"] = float((logps["new"] - logps["old"]).abs().max())


def _train(args: argparse.Namespace, marks: dict[str, float], **overrides: Any) -> None:
    from mleforge.train.config import TrainConfig
    from mleforge.train.recipe import train

    config = TrainConfig.preset_config("cpu", model={"spec": args.model, "threads": args.threads},
                                       stepwise={"enabled": False}, **overrides)
    with tempfile.TemporaryDirectory(prefix="mleforge-memory-run-") as scratch:
        started = time.perf_counter()
        train(config, Path(scratch) / "run", progress=False)
        marks["train_s"] = round(time.perf_counter() - started, 1)


def phase_grpo(args: argparse.Namespace, marks: dict[str, float]) -> None:
    _train(args, marks, warm_start="none", steps=args.steps)


def phase_sft(args: argparse.Namespace, marks: dict[str, float]) -> None:
    _train(args, marks, warm_start="auto", steps=1)


# The main job's parts (`main_job`): (module, attribute path, label); each call of that function or
# method counts as its part while it runs. Parts nest (a step holds its rollout, the rollout its sync).
PHASE_HOOKS = (
    ("mleforge.train.recipe", "stepwise_evaluation", "step-wise evaluation"),
    ("mleforge.train.recipe", "collect_expert", "expert's collection"),
    ("mleforge.train.recipe", "warm_start", "warm start (SFT)"),
    ("mleforge.train.grpo.trainer", "CurriculumGRPOTrainer.training_step", "GRPO step"),
    ("mleforge.train.grpo.ct2_rollout", "Ct2Rollout.__call__", "GRPO rollout"),
    ("mleforge.train.grpo.ct2_rollout", "Ct2Rollout.refresh", "GRPO rollout: sync"),
    ("mleforge.policies.engines.ct2", "Ct2Engine.generate", "ct2 generation (rollouts and evaluations)"),
    ("mleforge.train.grpo.trainer", "CurriculumGRPOTrainer.compute_loss", "GRPO loss forward"),
    ("accelerate", "Accelerator.backward", "backward (the warm start's and GRPO's)"),
)
OUTSIDE = "outside every part"


class PhasePeaks:
    """This process's RSS sampled every `interval` s on a thread; each sample raises the peak of
    every part running at that moment (OUTSIDE when none is). `wrap` makes a function a part.
    `anonymous_peak` is the largest resident set less its file-backed and shared-memory pages
    (the kernel's RssAnon): private memory, which only swap could take, where clean pages of
    files (memory-mapped weights) may be dropped and read again. Shared memory (tmpfs files,
    SysV segments) is not in it, though no kernel reclaims it without swap either."""

    def __init__(self, interval: float = 0.01) -> None:
        import collections
        import threading

        self.running: collections.Counter[str] = collections.Counter()
        self.peaks: dict[str, int] = {}
        self.anonymous_peak = 0
        self.lock = threading.Lock()
        self.interval = interval
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def rss(self) -> tuple[int, int]:
        """(resident, resident less its file and shared pages), bytes."""
        with open("/proc/self/statm") as statm:  # cheaper than psutil, at 100 samples a second
            _, resident, shared, *_ = statm.read().split()
        return int(resident) * self._page, (int(resident) - int(shared)) * self._page

    def sample(self) -> None:
        rss, anonymous = self.rss()
        with self.lock:
            self.anonymous_peak = max(self.anonymous_peak, anonymous)
            for part in [p for p, n in self.running.items() if n > 0] or [OUTSIDE]:
                if rss > self.peaks.get(part, 0):
                    self.peaks[part] = rss

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def wrap(self, fn: Any, part: str) -> Any:
        import functools

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.running[part] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.sample()  # the part's end, however short it was
                with self.lock:
                    self.running[part] -= 1
        return counted

    def hook(self, module: str, path: str, part: str) -> None:
        """Replace `module`.`path` (a function, or Class.method) by its counted self."""
        import importlib

        owner: Any = importlib.import_module(module)
        *outer, name = path.split(".")
        for attr in outer:
            owner = getattr(owner, attr)
        setattr(owner, name, self.wrap(getattr(owner, name), part))

    def stop(self) -> dict[str, float]:
        """Stop sampling; each part's peak in MiB, highest first."""
        self._stop.set()
        self._thread.join()
        self.sample()
        return {part: round(peak / MIB) for part, peak in sorted(self.peaks.items(), key=lambda kv: -kv[1])}


def phase_main_job(args: argparse.Namespace, marks: dict[str, float]) -> None:
    from mleforge.cli.main import main as cli

    peaks = PhasePeaks()
    for module, path, part in PHASE_HOOKS:
        peaks.hook(module, path, part)
    started = time.perf_counter()
    code: Any = 1
    try:
        code = cli(["train", *args.train_args]) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001  the peaks up to a late failure are still the record's
        marks["error"] = f"{type(exc).__name__}: {exc}"[:500]
        import traceback

        traceback.print_exc()
    finally:
        marks["train_s"] = round(time.perf_counter() - started, 1)
        marks["exit_code"] = code
        marks.update({f"peak {part} MiB": peak for part, peak in peaks.stop().items()})
        marks["peak anonymous (less files' pages) MiB"] = round(peaks.anonymous_peak / MIB)


def run_phase(name: str, args: argparse.Namespace) -> None:
    """Run phase `name` here and print its marks as the last line (JSON)."""
    marks: dict[str, Any] = {"start_mib": _rss_mib()}
    globals()[f"phase_{name}"](args, marks)
    print(json.dumps(marks), flush=True)
    if marks.get("exit_code"):  # main_job: its run failed; the marks are printed, the failure kept
        sys.exit(marks["exit_code"])


# --- the sampler ----------------------------------------------------------------------------------


def sample_tree(command: list[str], *, check: bool = True, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `command`, sampling its process tree's RSS: the peaks (MiB), the kernel's ru_maxrss
    of the biggest process, the wall time and the marks it printed last (JSON). A failure
    ends the benchmark with its stderr's end (`check`), or is recorded with it."""
    import psutil

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        root = psutil.Process(proc.pid)
        peak_tree = peak_main = 0
        timeline: list[list[float]] = []  # [seconds, tree MiB] once a second: where the peaks fall
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now, tree = _sample(root)
            peak_tree, peak_main = max(peak_tree, tree), max(peak_main, now)
            elapsed = time.perf_counter() - started
            if not timeline or elapsed - timeline[-1][0] >= 1.0:
                timeline.append([round(elapsed, 1), round(tree / MIB)])
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        printed, errors = out.read(), err.read()
    if proc.returncode != 0 and check:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{errors[-4000:]}")
    last = printed.strip().splitlines()[-1:]
    marks = json.loads(last[0]) if last and last[0].startswith("{") else {}
    return {"peak_tree_mib": round(peak_tree / MIB, 1), "peak_main_mib": round(peak_main / MIB, 1),
            "maxrss_mib": round(usage.ru_maxrss / 1024, 1), "wall_s": round(wall, 1), "marks": marks,
            "timeline": timeline, "exit_code": proc.returncode,
            **({"stderr_tail": errors[-2000:]} if proc.returncode else {})}


def _sample(root: Any) -> tuple[int, int]:
    """(the root process's RSS, the sum over it and its descendants), in bytes."""
    import psutil

    try:
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    own = total = 0
    for member in members:
        try:
            rss = member.memory_info().rss
        except psutil.Error:
            continue
        total += rss
        if member.pid == root.pid:
            own = rss
    return own, total


def measure_phase(name: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--phase", name, "--model", args.model, "--steps", str(args.steps),
               "--repeats", str(args.repeats), "--prompt-tokens", str(args.prompt_tokens),
               "--old-without", ",".join(args.old_without)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    return {"phase": name, **sample_tree(command)}


def measure_main_job(args: argparse.Namespace, src: str | None = None) -> dict[str, Any]:
    """The main job's record; with `src`, run on the mleforge in that source folder."""
    env = None
    if src is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="mleforge-memory-run-") as scratch:
        command = [sys.executable, __file__, "--phase", "main_job", "--train-args", "--run-dir",
                   str(Path(scratch) / "run"), *args.train_args]
        result = sample_tree(command, check=False, env=env)  # a run that fails late still shows its memory
    return {"phase": "main_job" if src is None else "main_job (baseline)", **({"src": src} if src else {}),
            **result}


def main_job_pairs(args: argparse.Namespace) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(baseline, this code) main jobs, `args.pairs` of them, the order alternated."""
    pairs = []
    for i in range(args.pairs):
        if i % 2 == 0:
            baseline = measure_main_job(args, args.baseline_src)
            current = measure_main_job(args)
        else:
            current = measure_main_job(args)
            baseline = measure_main_job(args, args.baseline_src)
        pairs.append((baseline, current))
    return pairs


def paired_figures(record: dict[str, Any]) -> dict[str, float]:
    """What the pairs compare of one main job: each part's peak, the max RSS, seconds."""
    marks = record["marks"]
    figures = {k: float(v) for k, v in marks.items() if k.startswith("peak ") and isinstance(v, (int, float))}
    figures["max RSS MiB"] = record["maxrss_mib"]
    if isinstance(marks.get("train_s"), (int, float)):
        figures["seconds of the run"] = float(marks["train_s"])
    return figures


def compare_pairs(pairs: list[tuple[dict[str, Any], dict[str, Any]]], baseline_src: str) -> dict[str, Any]:
    """The table of `main_job_pairs`: per figure, each side's mean and the paired difference."""
    import statistics

    sides = [(paired_figures(b), paired_figures(c)) for b, c in pairs]
    names = [k for k in sides[0][1] if all(k in b and k in c for b, c in sides)]
    rows = []
    for name in names:
        diffs = [c[name] - b[name] for b, c in sides]
        se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else None
        rows.append([name, round(statistics.fmean(b[name] for b, _ in sides), 1),
                     round(statistics.fmean(c[name] for _, c in sides), 1), round(statistics.fmean(diffs), 1),
                     None if se is None else round(se, 1)])
    return table(f"The main job against {baseline_src}, {len(pairs)} pair(s)",
                 ["figure", "baseline", "this code", "mean difference", "SE"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--model", default="bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--threads", type=int, default=None, help="torch and ct2 threads (none: their default)")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps of the grpo phase")
    parser.add_argument("--repeats", type=int, default=3,
                        help="updates of grpo_step (its fastest is kept) and pairs of grpo_step_paired")
    parser.add_argument("--prompt-tokens", type=int, default=1250,
                        help="the prompt of grpo_step's group (the cpu preset's states render ~1,250 tokens)")
    parser.add_argument("--old-without", default=",".join(LEAN_PARTS),
                        help="grpo_step_paired's old path: the trainer's with these parts of the lean path "
                             f"off (comma-separated, of {', '.join(LEAN_PARTS)}; default all: the path before them)")
    parser.add_argument("--main-job", action="store_true", help="also measure `mleforge train` itself")
    parser.add_argument("--train-args", nargs=argparse.REMAINDER, default=[],
                        help="arguments after this go to `mleforge train` (--main-job)")
    parser.add_argument("--baseline-src", default=None,
                        help="with --main-job: also run it on the mleforge in this src/ folder, paired (module docstring)")
    parser.add_argument("--pairs", type=int, default=1, help="--baseline-src: pairs of main jobs, the order alternated")
    parser.add_argument("--phase", help=argparse.SUPPRESS)  # run one phase here (the sampled process)
    parser.add_argument("--out", default=None, help="write the JSON record here")
    args = parser.parse_args(argv)
    args.old_without = [p.strip() for p in args.old_without.split(",") if p.strip()]
    if not args.old_without or set(args.old_without) - set(LEAN_PARTS):
        parser.error(f"--old-without: give some of {', '.join(LEAN_PARTS)}, comma-separated")
    if args.phase:
        run_phase(args.phase, args)
        return
    names = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(names) - set(PHASES))
    if unknown:
        parser.error(f"--phases: unknown {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    if args.baseline_src is not None:
        if not args.main_job or args.pairs < 1:
            parser.error("--baseline-src compares main jobs: add --main-job (and --pairs N, N >= 1)")
        if not (Path(args.baseline_src) / "mleforge" / "__init__.py").is_file():
            parser.error(f"--baseline-src {args.baseline_src}: no mleforge package in it; give a checkout's src/ folder")
        args.baseline_src = str(Path(args.baseline_src).resolve())
    rows = [measure_phase(name, args) for name in names]
    tables = []
    if args.main_job and args.baseline_src is not None:
        pairs = main_job_pairs(args)
        rows += [record for pair in pairs for record in pair]
        tables.append(compare_pairs(pairs, args.baseline_src))
    elif args.main_job:
        rows.append(measure_main_job(args))
    shown = table(f"Peak resident memory per phase ({args.model})",
                  ["phase", "peak tree MiB", "peak process MiB", "max RSS MiB", "wall s", "marks"],
                  [[r["phase"], r["peak_tree_mib"], r["peak_main_mib"], r["maxrss_mib"], r["wall_s"],
                    ", ".join(f"{k} {v}" for k, v in r["marks"].items())] for r in rows])
    write_result(args.out, "memory", shown, phases=rows, model=args.model, **({"tables": tables} if tables else {}))
    print_table(shown)
    for extra in tables:
        print_table(extra)


if __name__ == "__main__":
    main()
