"""LoRA on the top layers only (ModelConfig.lora_layers): which modules get an adapter, that the
backward pass stops at the lowest adapted layer, the presets, the flags, and a real GRPO run
(ct2 rollouts synced from the partial adapter) whose result loads."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

import peft  # noqa: E402
import torch  # noqa: E402

from mleforge.errors import ConfigError  # noqa: E402
from mleforge.policies import SamplingConfig, make_policy  # noqa: E402
from mleforge.train.config import ModelConfig, TrainConfig  # noqa: E402
from mleforge.train.model import decoder_linear_names, load_for_training, lora_config  # noqa: E402
from tests.train.test_cli import one_step  # noqa: E402

LINEARS = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def adapted(model) -> set[str]:
    """'<layer>.<module path>' of every trainable LoRA weight."""
    return {name.split("layers.", 1)[1].split(".lora_", 1)[0] for name, p in model.named_parameters()
            if p.requires_grad}


def peft_model(spec: str, layers: int | None):
    config = ModelConfig(spec=spec, lora_layers=layers)
    loaded = load_for_training(config)
    return peft.get_peft_model(loaded.model, lora_config(config, loaded.model))


def test_the_adapter_goes_on_the_top_layers_only_and_backward_stops_below_them(tiny):
    # the tiny Llama has 2 decoder layers
    assert decoder_linear_names(load_for_training(ModelConfig(spec=f"hf:{tiny}")).model) == LINEARS
    top = peft_model(f"hf:{tiny}", 1)
    every = {f"1.self_attn.{n}" for n in ("k_proj", "o_proj", "q_proj", "v_proj")} | \
        {f"1.mlp.{n}" for n in ("down_proj", "gate_proj", "up_proj")}
    assert adapted(top) == every
    # every layer, as PEFT's all-linear: for None and for a count the model does not exceed
    for layers in (None, 2, 5):
        assert {a.split(".", 1)[0] for a in adapted(peft_model(f"hf:{tiny}", layers))} == {"0", "1"}

    needs_grad = {}
    layers = top.get_base_model().model.layers
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda m, a, out, i=i: needs_grad.__setitem__(i, out[0].requires_grad
                                                                                  if isinstance(out, tuple)
                                                                                  else out.requires_grad))
    ids = torch.randint(3, 200, (1, 24))
    loss = top(input_ids=ids, labels=ids).loss
    loss.backward()
    # layer 0 holds no trainable weight: its output is outside the graph, so backward never enters it
    assert needs_grad == {0: False, 1: True}
    # B starts at zero (so A's gradient is zero at the first step); each B of the top layer learns
    grads = [p.grad for name, p in top.named_parameters() if "lora_B" in name]
    assert len(grads) == 7 and all(g is not None and torch.count_nonzero(g) > 0 for g in grads)


def test_presets_config_and_flags(capsys):
    # every layer by default (the top-12 setting halved the main job's warm start but left it malformed)
    assert TrainConfig().model.lora_layers is None
    assert TrainConfig.preset_config("gpu-1x").model.lora_layers is None
    given = TrainConfig.preset_config("cpu", model={"lora_layers": 12})
    assert (given.model.lora_layers, given.model.lora_rank) == (12, 16)
    assert ModelConfig().lora_layers is None  # mleforge sft's default: every layer
    with pytest.raises(ConfigError, match=r"model.lora_layers: got 0; expected an integer >= 1"):
        ModelConfig(lora_layers=0)
    # a run written before the setting existed reads as what it did: every layer
    saved = given.to_dict()
    del saved["model"]["lora_layers"]
    assert TrainConfig.from_dict(saved).model.lora_layers is None
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import train_config

    parser = build_parser()
    layers = lambda *flags: train_config(parser.parse_args(["train", *flags])).model.lora_layers  # noqa: E731
    assert (layers("--lora-layers", "all"), layers("--lora-layers", "12"), layers()) == (None, 12, None)
    for bad in ("0", "-3"):
        with pytest.raises(ConfigError, match=r"model.lora_layers: got -?\d+; expected an integer >= 1"):
            layers("--lora-layers", bad)
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--lora-layers", "x"])
    assert "invalid" in capsys.readouterr().err


def test_train_with_the_adapter_on_the_top_layer_runs_and_its_result_loads(tiny, titanic, journals, data_root,
                                                                          tmp_path):
    run = tmp_path / "run"
    assert one_step(tiny, journals, data_root, run, "--lora-layers", "1")["steps"] == 1
    adapter = json.loads((run / "final" / "adapter_config.json").read_text())
    assert adapter["layers_to_transform"] == [1] and sorted(adapter["target_modules"]) == LINEARS
    final = make_policy(f"hf:{run / 'final'}", num_threads=1)
    assert final.generate([[{"role": "user", "content": "hi"}]], sampling=SamplingConfig(max_new_tokens=4))


def test_the_benchmark_times_each_setting_and_writes_its_json(tiny, tmp_path):
    from tests.benchmark_module import assert_convention, load_benchmark

    bench = load_benchmark("lora_layers")
    out = tmp_path / "lora_layers.json"
    assert bench.main(["--model", f"hf:{tiny}", "--layers", "all,1", "--tokens", "32", "--completion", "8",
                       "--reps", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {r["lora_layers"]: r for r in result["rows"]}
    assert set(rows) == {"all", 1}
    assert (rows["all"]["adapted_layers"], rows[1]["adapted_layers"], rows[1]["decoder_layers"]) == (2, 1, 2)
    # the tiny model's two layers have the same shapes: the top one holds half the adapter
    assert rows["all"]["trainable"] == 2 * rows[1]["trainable"] > 0
    assert rows["all"]["vs_all"] == 1.0 and len(rows[1]["step_s"]) == 1
    assert_convention(result, "lora_layers")
    assert result["meta"]["command"].endswith(f"--reps 1 --out {out}")  # main's argv, not the test runner's
    assert [r[0] for r in result["table"]["rows"]] == ["all", 1] and result["table"]["rows"][0][4] == 1.0
