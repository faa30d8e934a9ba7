"""A tiny random Llama with a real byte-level BPE tokenizer and a chat template, built offline."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXT = ("def add(a, b):\n    return a + b\n\nimport numpy as np\nimport pandas as pd\n"
        "the model trains on the data and writes a submission file with predictions\n") * 20


def build_tokenizer():
    """A byte-level BPE of 320 tokens trained on TEXT, with a chat template (`<|im_end|>` ends a turn)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                        pad_token="<|pad|>", bos_token="<|im_start|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(folder: Path, architecture: str = "llama") -> Path:
    """`architecture` "qwen2" gives a Qwen2 (the bundled Qwen's kind: biased q/k/v, tied
    embeddings, an embedding larger than the tokenizer's vocabulary) of the same size."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    config_cls, model_cls, extra = {
        "llama": (LlamaConfig, LlamaForCausalLM, {}),
        # Reloaded as a Qwen2 tokenizer it gains a token; the real Qwen's embedding has room
        # for 271 more than its tokenizer's.
        # A wider initialization: at the default, tied random embeddings answer "\n" forever.
        "qwen2": (Qwen2Config, Qwen2ForCausalLM, {"tie_word_embeddings": True,
                                                  "vocab_size": len(tokenizer) + 64,
                                                  "initializer_range": 0.5}),
    }[architecture]
    extra.setdefault("vocab_size", len(tokenizer))
    config = config_cls(hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                        **extra)
    torch.manual_seed(0)
    model = model_cls(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_lora_adapter(base: Path, folder: Path) -> Path:
    """A LoRA adapter on the tiny model whose weights are not zero, so it changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 2.0)
    peft_model.save_pretrained(folder)
    return folder


def train_lora(base: Path, messages: list[dict[str, str]], answer: str, *, steps: int = 80,
               seed: int = 0):
    """A LoRA adapter on the tiny model, trained until its greedy answer to `messages` is
    `answer`; returns (peft model, tokenizer), the model in eval mode."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    target = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, :len(prompt)] = -100  # learn the answer, not the prompt
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                            "gate_proj", "up_proj", "down_proj"]))
    optimizer = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=2e-2)
    for _ in range(steps):
        peft_model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    peft_model.eval()
    return peft_model, tokenizer
