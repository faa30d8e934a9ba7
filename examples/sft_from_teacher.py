"""SFT from a teacher (ML-Agent's exploration-enriched fine-tuning): a teacher model behind an
OpenAI-compatible API runs expert episodes on the tasks (each episode's first prompt seeded
with different ideas, so trajectories differ), every step becomes a chat sample, and a
smaller model is fine-tuned on them (LoRA).

    # a served teacher (vLLM, SGLang, llama.cpp's server, a hosted API):
    python examples/sft_from_teacher.py --teacher-url http://localhost:8000/v1 \
        --teacher Qwen/Qwen2.5-Coder-32B-Instruct --model bundled:qwen2.5-coder-0.5b
    # offline: the template expert (scripted, real solutions from a catalog) as the teacher
    python examples/sft_from_teacher.py --teacher template --tasks titanic --episodes 1 --steps 4

The fine-tuned model is then a warm start: mleforge train --sft runs/examples/sft/sft
The same from the shell: mleforge collect --teacher openai:MODEL, then mleforge sft --samples ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.expert.collect import collect_samples
from mleforge.expert.collect_config import CollectConfig
from mleforge.policies import make_policy
from mleforge.tasks.registry import TaskRegistry
from mleforge.train.config import ModelConfig, SFTRunConfig
from mleforge.train.sft import run_sft


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", required=True, help="the served model's name, or template (offline)")
    parser.add_argument("--teacher-url", help="the teacher server's /v1 URL")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the NAME of the variable holding the key")
    parser.add_argument("--model", default="bundled:qwen2.5-coder-0.5b", help="the student: bundled:NAME or hf:PATH")
    parser.add_argument("--tasks", default="lite", help="lite | all | id,id,...")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per task")
    parser.add_argument("--steps", type=int, default=6, help="steps per episode")
    parser.add_argument("--prompt-profile", default="compact", choices=("compact", "full"),
                        help="how the samples' prompts are rendered: compact, as `mleforge train`'s cpu preset does")
    parser.add_argument("--embedder", default="auto", help="how ideas are told apart: auto (MiniLM embeddings where "
                                                           "installed: mleforge[ideas]) | tfidf")
    parser.add_argument("--sft-steps", type=int, help="optimizer steps (default: 2 epochs)")
    parser.add_argument("--out", default="runs/examples/sft", help="collect/ and sft/ go here")
    args = parser.parse_args(argv)

    out = Path(args.out)
    if args.teacher == "template":
        teacher, policy = "template", None
    else:
        if not args.teacher_url:
            parser.error("--teacher-url is needed for a served teacher (or --teacher template)")
        teacher = f"openai:{args.teacher}"
        policy = make_policy(teacher, base_url=args.teacher_url, api_key_env=args.api_key_env)
    collect = CollectConfig(tasks=args.tasks, teacher=teacher, episodes=args.episodes, steps=args.steps,
                            prompt_profile=args.prompt_profile, embedder=args.embedder)
    collected = collect_samples(collect, out / "collect", registry=TaskRegistry(), policy=policy, progress=True)
    print(f"collected {collected.counts.get('samples', 0)} samples: {collected.samples_path}")

    config = SFTRunConfig(samples=collected.samples_path, out=str(out / "sft"), model=ModelConfig(spec=args.model),
                          sft={"max_steps": args.sft_steps})
    result = run_sft(config)
    print(f"fine-tuned {result.steps} steps, completion loss {result.loss_before:.3f} -> {result.loss_after:.3f}; "
          f"model hf:{result.model_dir}")


if __name__ == "__main__":
    main()
