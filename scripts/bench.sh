#!/usr/bin/env bash
# Benchmarks; every figure comes from a measurement on this machine and is written to
# results/bench/. Run scripts/build.sh first (or scripts/test.sh).
#   trainer   D512/L8/T512/B4 tokens/s, GEMM efficiency and hardware MFU, fp32 and bf16,
#             one rank through the launcher
#   eager     tiny D128/L2/T128/B2: ftbench tokens/s over a plain PyTorch eager step
#   dpscale   D512 tokens/s per rank, world 2 over world 1
#   memory    peak RSS per rank, world 2, DDP vs ZeRO-1/2/3 on a 274 M model, and the
#             --estimate-memory figure for each
#   launcher  time from launcher start until every worker has exec'd
#   aggregate sweep_tagger aggregate over 1,000 runs x 2 ranks x 1,000 steps
#   data      per-rank data time at world 1, 2, 4 (tiny model, through the launcher)
#   hfload    load time and peak RSS per rank of a 274 M model from safetensors
#             (model.from_pretrained), world 1 and ZeRO-3 world 2
#   textdata  D512/L8 tokens/s on a JSONL text corpus tokenized by sentencepiece against a
#             pre-tokenized .bin of the same token stream, 1 rank through the launcher
#   ckpt      checkpoint save and load time and bytes per rank (D512/L8 and the 274 M model,
#             DDP and ZeRO-3, world 2 through the launcher) against dd conv=fsync of the same
#             bytes to the same disk; the per-step stop agreement's share of the step (tiny
#             model, world 2): its marginal cost (trainer/bench/agree_cost.cpp, the agreement
#             all-reduce with and without the stop flag, interleaved; FTB_AGREE_ROUNDS rounds,
#             default 20000), the aligned all-reduce latency and the in-trainer agree_s
#   port      this build against a baseline build (FTB_BASELINE_BUILD, e.g. the last
#             libtorch 1.13 commit built in its own folder): D512/L8 fp32 and bf16 and the
#             tiny model, alternating rounds, with the tiny model's PyTorch eager step
#   gloo      torch 2.x Gloo's own collectives (bf16 all-reduce, reduce_scatter_tensor) against
#             the forms Comm uses on Gloo, 2 ranks over TCP loopback
#   nf4       peak RSS of LoRA over an NF4 base (lora.base_dtype) against a bf16 base, world 1,
#             274 M model, and the --estimate-memory figure of each
#   lora      LoRA (rank 16, all seven targets) against full finetuning, D512/L8 and the 274 M
#             model, 1 rank: tokens/s, peak RSS, step breakdown; and ftbench against HF TRL's
#             SFTTrainer (peft for LoRA) on the same HF model directory and prompt/completion
#             JSONL, full and LoRA, alternating rounds. TRL and its dependencies are installed
#             here only (scripts/requirements-bench.txt, into build/bench-py)
#   pipeline  (1) bubble: D512/L8, pp 2 on one host (2 ranks through the launcher), m = 8
#             micro-batches of 1 sample, 1F1B and interleaved 1F1B (v = 2), vocabulary 512
#             and 32000: each stage's measured bubble beside the theory. (2) a slow network:
#             two `ip netns` hosts whose link tc tbf shapes to each rate of FTB_PP_RATES
#             (default 100mbit 300mbit 1gbit 3gbit off; needs root, else reported as skipped),
#             D512/L8 global batch 8 as DDP, ZeRO-3 and pp 2 (1F1B), one rank per host via
#             mpirun + launcher: tokens/s per host, bytes sent per step, where the ranking
#             changes. (3) link: a 1 MiB transfer's round trip between two ranks of this
#             host through local memory and through Gloo. FTB_PP_PARTS="bubble", "link" or
#             "net" reruns one part
#   tune      `sweep_tagger tune` against the exhaustive sweep of the same space: (local)
#             configs/tune/d512_local.toml, D512/L8 on 2 local ranks, DDP / ZeRO-1 / ZeRO-3 /
#             TP 2 / PP 2 x micro-batch x activation checkpointing, 30 points; (net)
#             configs/tune/d512_two_hosts.toml on two netns hosts at 100 Mbit/s (needs root):
#             both winners, the machine time of each, the step-time model's error.
#             FTB_TUNE_PARTS="local" or "net" reruns one part
#   tokenizer the tokenizer.json encoder (`trainer tokenize`) against HF tokenizers (Rust), one
#             thread each, on 10,000 multilingual texts and one small tokenizer per family
#             (GPT-2, Llama 3, Qwen 2, SmolLM2, Mistral, Llama 2): tokens/s and the same ids;
#             FTB_TOK_ROUNDS alternating rounds (default 3), the best of each reported
#   gpu       on one GPU (exit 2 without one), bf16, seq 2048, micro-batch 1/2/4/8: ftbench
#             against a plain PyTorch loop of the same model and tokens
#             (scripts/bench_gpu_reference.py, SDPA, fused AdamW), eager and under torch.compile,
#             on D2048/L16 and a Llama-3.2-1B shape; FTB_GPU_MODELS, FTB_GPU_MB, FTB_GPU_ROUNDS
#             (default 3), FTB_GPU_STEPS (measured steps per round, default 4), FTB_PYTHON
# Usage: scripts/bench.sh [trainer|eager|dpscale|memory|launcher|aggregate|data|hfload|textdata|ckpt|port|gloo|lora|nf4|pipeline|tokenizer|tune|gpu ...]
#        (default: all but hfload, ckpt, port, lora, nf4, pipeline, tokenizer, tune and gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="$ROOT/.venv/bin/python"  # the project venv (scripts/setup.sh): torch 2.x, h5py, pandas
BUILD=${FTB_BUILD_DIR:-$ROOT/build/release}
# Builds a benchmark program that the default build leaves out (trainer/CMakeLists.txt).
build_bench_program() { cmake --build "$BUILD" --target "$1" >/dev/null; }
OUT=$ROOT/results/bench
mkdir -p "$OUT"
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(trainer eager dpscale memory launcher aggregate data textdata)

# Every run saves a checkpoint when it ends (checkpoint.interval = 0); the reports read only
# metrics and logs, so the gigabytes of weights go once a report is written.
drop_checkpoints() {  # drop_checkpoints RUNS_DIR
  rm -rf "$1"/*/checkpoints
}

# Before each timed run: write back what earlier runs left dirty in the page cache (an
# end-of-run checkpoint is hundreds of MB), so the kernel's writeback threads and the block
# device's interrupts do not land in the next run's measured steps.
settle() {
  sync
}

# The documented way: through the launcher with default flags (tuned worker environment).
launch() {  # launch N OUT_LOG -- command...
  local n=$1 log=$2
  shift 3
  settle
  "$BUILD/launcher/launcher" --nproc-per-node "$n" -- "$@" >"$log" 2>&1
}

bench_trainer() {
  local md=$OUT/trainer_mfu.md runs=$OUT/runs/trainer
  rm -rf "$runs"
  mkdir -p "$runs"
  for dtype in fp32 bf16; do
    echo "bench: D512/L8/T512/B4 $dtype, 1 rank"
    launch 1 "$runs/$dtype.log" -- "$BUILD/trainer/trainer" --config configs/runs/bench-d512.toml \
      --output-dir "$runs/$dtype" --no-sweep-dir training.dtype="$dtype"
  done
  "$PY" scripts/bench_report.py trainer "$runs/fp32" "$runs/bf16" > "$md"
  drop_checkpoints "$runs"
  cat "$md"
}

# ftbench against a plain Python PyTorch eager step of the same tiny model (D128/L2/T128/B2).
# Five alternating rounds of 300 steps (the machine's load drifts; each implementation's
# best round is compared, every round is listed, with the load average before and after).
bench_eager() {
  local runs=$OUT/runs/eager
  rm -rf "$runs"
  mkdir -p "$runs"
  cp /proc/loadavg "$runs/loadavg.before"
  for round in 1 2 3 4 5; do
    echo "bench: tiny D128/L2/T128/B2, round $round: ftbench trainer, then PyTorch eager"
    launch 1 "$runs/ftbench$round.log" -- "$BUILD/trainer/trainer" --config configs/runs/tiny.toml \
      --output-dir "$runs/ftbench$round" --no-sweep-dir model.dim=128 model.ffn_dim=384 \
      data.seq_len=128 data.min_doc_len=128 training.micro_batch_size=2 training.max_steps=300 \
      metrics.skip_first_steps=10 training.threads=1 metrics.log_every=100
    launch 1 "$runs/eager$round.log" -- "$PY" scripts/bench_eager.py --dim 128 \
      --layers 2 --heads 4 --kv-heads 2 --ffn 384 --vocab 512 --seq 128 --batch 2 --threads 1 \
      --steps 300 --warmup 10 --out "$runs/eager$round.json"
  done
  cp /proc/loadavg "$runs/loadavg.after"
  "$PY" scripts/bench_report.py eager "$runs"/ftbench{1,2,3,4,5} -- \
    "$runs"/eager{1,2,3,4,5}.json > "$OUT/eager.md"
  cat "$OUT/eager.md"
}

# Three alternating rounds of: world 1; two independent world-1 runs at once, one per core
# (the ceiling that shared caches, memory and clocks leave when both cores compute); world
# 2; and world 2 with the collectives on Gloo (parallel.local_collectives=off). Every rank
# gets one core: world-1 runs start under `taskset -c K`, so the launcher binds the worker
# to that core, as it binds each world-2 rank to one. The machine's load and clock drift
# between runs, so each configuration's best round is compared and every round is listed.
bench_dpscale() {
  local runs=$OUT/runs/dpscale
  rm -rf "$runs"
  mkdir -p "$runs"
  cp /proc/loadavg "$runs/loadavg.before"
  local d512=(--config configs/runs/bench-d512.toml --no-sweep-dir training.max_steps=8)
  for round in 1 2 3; do
    echo "bench: D512/L8/T512/B4 fp32, round $round: world 1, 2 x world 1, world 2, world 2 on Gloo"
    settle
    taskset -c 0 "$BUILD/launcher/launcher" --nproc-per-node 1 -- "$BUILD/trainer/trainer" \
      "${d512[@]}" --output-dir "$runs/w1.r$round" >"$runs/w1.r$round.log" 2>&1
    settle
    for k in 0 1; do
      taskset -c $k "$BUILD/launcher/launcher" --nproc-per-node 1 -- "$BUILD/trainer/trainer" \
        "${d512[@]}" --output-dir "$runs/pair$k.r$round" >"$runs/pair$k.r$round.log" 2>&1 &
    done
    wait
    launch 2 "$runs/w2.r$round.log" -- "$BUILD/trainer/trainer" "${d512[@]}" \
      --output-dir "$runs/w2.r$round"
    launch 2 "$runs/w2gloo.r$round.log" -- "$BUILD/trainer/trainer" "${d512[@]}" \
      --output-dir "$runs/w2gloo.r$round" parallel.local_collectives=off
  done
  cp /proc/loadavg "$runs/loadavg.after"
  "$PY" scripts/bench_report.py dpscale "$runs" > "$OUT/dpscale.md"
  drop_checkpoints "$runs"
  cat "$OUT/dpscale.md"
}

# The libtorch 2.x build against a baseline build of the same sources (the last libtorch 1.13
# commit, built in its own folder: FTB_BASELINE_BUILD), on the same CPU in the same run: three
# alternating rounds of D512/L8 fp32, D512/L8 bf16 and the tiny model (D128/L2, 300 steps),
# each through this build's launcher, and the tiny model's PyTorch eager step (the venv's
# torch) in every round. Each configuration's best round is compared; every round is listed.
# How a trainer build spells the steps left out of summaries: a baseline built before the key
# was renamed knows training.warmup_steps only.
skip_key() {
  if "$1/trainer/trainer" --help-config 2>/dev/null | grep -q 'metrics.skip_first_steps'; then
    echo metrics.skip_first_steps
  else
    echo training.warmup_steps
  fi
}

bench_port() {
  local base=${FTB_BASELINE_BUILD:?set FTB_BASELINE_BUILD to the baseline build folder}
  local runs=$OUT/runs/port
  rm -rf "$runs"
  mkdir -p "$runs"
  cp /proc/loadavg "$runs/loadavg.before"
  local tiny=(--config configs/runs/tiny.toml model.dim=128 model.ffn_dim=384 data.seq_len=128
              data.min_doc_len=128 training.micro_batch_size=2 training.max_steps=300
              training.threads=1 metrics.log_every=100)
  for round in 1 2 3; do
    for build in "$base" "$BUILD"; do
      local tag=new
      [ "$build" = "$BUILD" ] || tag=base
      echo "bench: port, round $round, $tag build ($build)"
      for dtype in fp32 bf16; do
        launch 1 "$runs/d512_$dtype.$tag.r$round.log" -- "$build/trainer/trainer" \
          --config configs/runs/bench-d512.toml --no-sweep-dir training.dtype=$dtype \
          --output-dir "$runs/d512_$dtype.$tag.r$round"
      done
      if [ $tag = new ]; then  # libtorch's fused SDPA kernel against the default attention
        for dtype in fp32 bf16; do
          launch 1 "$runs/d512_${dtype}_sdpa.new.r$round.log" -- "$build/trainer/trainer" \
            --config configs/runs/bench-d512.toml --no-sweep-dir training.dtype=$dtype \
            training.attention=sdpa --output-dir "$runs/d512_${dtype}_sdpa.new.r$round"
        done
      fi
      launch 1 "$runs/tiny.$tag.r$round.log" -- "$build/trainer/trainer" "${tiny[@]}" \
        "$(skip_key "$build")=10" --no-sweep-dir --output-dir "$runs/tiny.$tag.r$round"
    done
    launch 1 "$runs/eager.r$round.log" -- "$PY" scripts/bench_eager.py --dim 128 --layers 2 \
      --heads 4 --kv-heads 2 --ffn 384 --vocab 512 --seq 128 --batch 2 --threads 1 --steps 300 \
      --warmup 10 --out "$runs/eager.r$round.json"
  done
  cp /proc/loadavg "$runs/loadavg.after"
  "$PY" scripts/bench_report.py port "$runs" > "$OUT/port.md"
  drop_checkpoints "$runs"
  cat "$OUT/port.md"
}

# Two ranks of the memory model on this host: memory_pair DIR LOG_PREFIX [key=value ...]
memory_pair() {
  local dir=$1 log=$2 port=$((20000 + RANDOM % 20000)) pids=()
  shift 2
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port OMP_NUM_THREADS=1 "$BUILD/trainer/trainer" \
      --config configs/runs/bench-memory.toml --output-dir "$dir" --no-sweep-dir \
      "$@" >"$log.r$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  "$BUILD/trainer/trainer" --config configs/runs/bench-memory.toml --estimate-memory \
    --world-size 2 "$@" >"$dir/estimate.txt"
}

bench_memory() {
  local runs=$OUT/runs/memory
  rm -rf "$runs"
  mkdir -p "$runs"
  for stage in 0 1 2 3; do
    echo "bench: memory, world 2, zero_stage $stage"
    memory_pair "$runs/zero$stage" "$runs/zero$stage" parallel.dp_shard=2 parallel.zero_stage=$stage
  done
  # LoRA on all seven targets: the frozen base, adapters' gradients and optimizer state.
  for rank in 8 64; do
    for stage in 0 3; do
      echo "bench: memory, world 2, LoRA rank $rank, zero_stage $stage"
      memory_pair "$runs/lora$rank.zero$stage" "$runs/lora$rank.zero$stage" parallel.dp_shard=2 \
        parallel.zero_stage=$stage lora.rank=$rank lora.targets='"all"'
    done
  done
  # Activation-dominated check: the D512/L8 model, B4 x T512, with and without checkpointing.
  for ck in none full; do
    echo "bench: memory, activations, checkpointing $ck"
    OMP_NUM_THREADS=1 "$BUILD/trainer/trainer" --config configs/runs/bench-d512.toml \
      --output-dir "$runs/act_$ck" --no-sweep-dir training.activation_checkpointing="\"$ck\"" \
      training.max_steps=2 metrics.skip_first_steps=0 metrics.peak_tflops=0.1 \
      >"$runs/act_$ck.log" 2>&1
    "$BUILD/trainer/trainer" --config configs/runs/bench-d512.toml --estimate-memory \
      training.activation_checkpointing="\"$ck\"" >"$runs/act_$ck/estimate.txt"
  done
  "$PY" scripts/bench_memory_report.py "$runs" > "$OUT/memory.md"
  drop_checkpoints "$runs"
  cat "$OUT/memory.md"
}

# QLoRA: peak RSS of one rank of the memory model with LoRA r8 on all seven targets over a
# bf16 base against an NF4 one (lora.base_dtype), in fp32 and in bf16 compute, and the
# estimate of each.
bench_nf4() {
  local runs=$OUT/runs/nf4
  rm -rf "$runs"
  mkdir -p "$runs"
  local keys=(lora.rank=8 lora.targets='"all"' checkpoint.save_final=false)
  for dtype in fp32 bf16; do
    for base in bf16 nf4; do
      echo "bench: nf4, world 1, LoRA rank 8, training.dtype $dtype, base $base"
      local run=(--config configs/runs/bench-memory.toml "${keys[@]}"
                 training.dtype="\"$dtype\"" lora.base_dtype="\"$base\"")
      OMP_NUM_THREADS=1 "$BUILD/trainer/trainer" "${run[@]}" --output-dir "$runs/$dtype.$base" \
        --no-sweep-dir >"$runs/$dtype.$base.log" 2>&1
      "$BUILD/trainer/trainer" "${run[@]}" --estimate-memory >"$runs/$dtype.$base/estimate.txt"
    done
  done
  "$PY" scripts/bench_memory_report.py --nf4 "$runs" > "$OUT/nf4.md"
  cat "$OUT/nf4.md"
}

bench_data() {
  local runs=$OUT/runs/data
  rm -rf "$runs"
  for n in 1 2 4; do
    echo "bench: data, world $n"
    "$BUILD/launcher/launcher" --nproc-per-node "$n" -- "$BUILD/trainer/trainer" \
      --config configs/runs/tiny.toml --output-dir "$runs/w$n" --no-sweep-dir \
      data.seq_len=256 training.micro_batch_size=4 training.max_steps=40 \
      metrics.skip_first_steps=5 >"$runs.w$n.log" 2>&1
  done
  "$PY" scripts/bench_data_report.py "$runs/w1" "$runs/w2" "$runs/w4" > "$OUT/data.md"
  cat "$OUT/data.md"
}

bench_hfload() {
  local runs=$OUT/runs/hfload model=$OUT/runs/hfload/mem-270m-hf
  rm -rf "$runs"
  mkdir -p "$runs"
  echo "bench: hfload, writing $model"
  "$PY" scripts/bench_hf_model.py configs/models/mem-270m.toml "$model"
  local args=(--config configs/runs/bench-memory.toml --no-sweep-dir model.from_pretrained="$model"
              training.max_steps=1 metrics.skip_first_steps=0)
  echo "bench: hfload, world 1"
  OMP_NUM_THREADS=1 "$BUILD/trainer/trainer" "${args[@]}" --output-dir "$runs/w1" >"$runs/w1.r0.log" 2>&1
  echo "bench: hfload, ZeRO-3 world 2"
  local port=$((20000 + RANDOM % 20000)) pids=()
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      OMP_NUM_THREADS=1 "$BUILD/trainer/trainer" "${args[@]}" --output-dir "$runs/zero3_w2" \
      parallel.dp_shard=2 parallel.zero_stage=3 >"$runs/zero3_w2.r$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  "$PY" scripts/bench_hf_report.py "$runs" "$model" > "$OUT/hf_load.md"
  rm -rf "$model"  # 1 GiB of random weights
  cat "$OUT/hf_load.md"
}

# JSONL + sentencepiece against a pre-tokenized .bin of the same tokens. The .bin is
# spm_encode's ids with [bos]/[eos] around each document, i.e. the stream the JSONL run trains
# on with packing, so both runs train on the same windows (the report checks the trainer's
# token cache against the .bin, and the losses). Two alternating rounds: round 1's JSONL run
# tokenizes at start and writes the cache, round 2's reads it.
bench_textdata() {
  local runs=$OUT/runs/textdata data=$OUT/runs/textdata/data
  rm -rf "$runs"
  mkdir -p "$data"
  echo "bench: textdata, writing the corpus, training sentencepiece, encoding the .bin"
  "$PY" scripts/bench_text_corpus.py corpus "$data" 2000
  spm_train --input="$data/corpus.txt" --model_prefix="$data/spm" --vocab_size=4000 \
    --model_type=unigram --num_threads=1 >"$data/spm_train.log" 2>&1
  "$PY" scripts/bench_text_corpus.py bin "$data/spm.model" "$data/corpus.txt" \
    "$data/corpus.bin"
  local args=(--config configs/runs/bench-d512.toml --no-sweep-dir)
  cut -d' ' -f1-3 /proc/loadavg >"$runs/loadavg.before"
  for round in 1 2; do
    echo "bench: textdata round $round: D512/L8 on the .bin, then on the JSONL"
    launch 1 "$runs/bin$round.log" -- "$BUILD/trainer/trainer" "${args[@]}" \
      --output-dir "$runs/bin$round" data.source="\"$data/corpus.bin\"" data.bin_dtype=uint16
    launch 1 "$runs/jsonl$round.log" -- "$BUILD/trainer/trainer" "${args[@]}" \
      --output-dir "$runs/jsonl$round" data.source="\"$data/corpus.jsonl\"" \
      data.tokenizer="\"$data/spm.model\"" data.padding='"packing"'
  done
  cut -d' ' -f1-3 /proc/loadavg >"$runs/loadavg.after"
  "$PY" scripts/bench_textdata_report.py "$runs" > "$OUT/textdata.md"
  cat "$OUT/textdata.md"
}

# One model and layout: run 1 saves after steps 1 and 2; run 2 (the same run, resume and
# interval are not part of its hash) resumes from step 1 (load) and trains step 2 again; then
# dd writes each rank's step-2 file (copied to /dev/shm first, so dd reads from memory) to
# the same directory with conv=fsync, all ranks at once as in a save.
ckpt_case() {  # ckpt_case DIR CONFIG [overrides...]
  local d=$1 cfg=$2
  shift 2
  local args=(--config "$cfg" --output-dir "$d" --no-sweep-dir data.seq_len=64 data.min_doc_len=64
              training.micro_batch_size=1 training.max_steps=2 metrics.skip_first_steps=0
              metrics.peak_tflops=0.1 checkpoint.keep_last=0 "$@")
  launch 2 "$d.save.log" -- "$BUILD/trainer/trainer" "${args[@]}" checkpoint.interval=1
  launch 2 "$d.load.log" -- "$BUILD/trainer/trainer" "${args[@]}" \
    checkpoint.resume="$d/checkpoints/step_00000001"
  local step=$d/checkpoints/step_00000002 shm=/dev/shm/ftb-bench-ckpt.$$ pids=() f r
  mkdir -p "$shm"
  cp "$step"/rank_*.h5 "$shm"/
  for f in "$shm"/rank_*.h5; do
    r=$(basename "$f" .h5)
    dd if="$f" of="$d/dd.$r.bin" bs=4M conv=fsync 2>"$d.dd.$r.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  rm -rf "$shm" "$d"/dd.*.bin "$d/checkpoints"  # gigabytes; the logs and metrics stay
}

bench_ckpt() {
  local runs=$OUT/runs/ckpt
  rm -rf "$runs"
  mkdir -p "$runs"
  cat /proc/loadavg >"$runs/loadavg.before"
  for layout in ddp zero3; do
    local lay=()
    [ "$layout" = ddp ] || lay=(parallel.dp_shard=2 parallel.zero_stage=3)
    echo "bench: ckpt, D512/L8, $layout, world 2"
    ckpt_case "$runs/d512.$layout" configs/runs/bench-d512.toml "${lay[@]}"
    echo "bench: ckpt, 274 M model, $layout, world 2"
    ckpt_case "$runs/270m.$layout" configs/runs/bench-memory.toml "${lay[@]}"
  done
  echo "bench: ckpt, stop agreement, tiny model, world 2"
  launch 2 "$runs/agree.log" -- "$BUILD/trainer/trainer" --config configs/runs/tiny.toml \
    --output-dir "$runs/agree" --no-sweep-dir training.max_steps=300 metrics.skip_first_steps=20 \
    metrics.log_every=100
  echo "bench: ckpt, stop agreement, 5/7/8-double all-reduce A/B, world 2 (${FTB_AGREE_ROUNDS:-20000} rounds)"
  build_bench_program ftb_agree_bench
  launch 2 "$runs/agree_ab.log" -- "$BUILD/trainer/ftb_agree_bench" "$runs/agree_ab" \
    --rounds "${FTB_AGREE_ROUNDS:-20000}"
  cat /proc/loadavg >"$runs/loadavg.after"
  "$PY" scripts/bench_ckpt_report.py "$runs" > "$OUT/ckpt.md"
  cat "$OUT/ckpt.md"
}

# TRL, datasets and what they need beyond the project venv: bench-only, pinned, --no-deps, into
# build/bench-py (reinstalled when scripts/requirements-bench.txt changes). Prints the folder.
bench_pydeps() {
  local dir=$ROOT/build/bench-py stamp
  stamp=$(sha256sum scripts/requirements-bench.txt | cut -c1-16)
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    "$PY" -m pip install --quiet --no-deps --target "$dir" -r scripts/requirements-bench.txt >&2
    echo "$stamp" >"$dir/.stamp"
  fi
  echo "$dir"
}

LORA_ARGS=(lora.rank=16 lora.alpha=32 lora.targets=all)
TRL_LORA_ARGS=(--lora-rank 16 --lora-alpha 32 --lora-targets q,k,v,o,gate,up,down)

# Part 1: ftbench LoRA against full finetuning on D512/L8 (bench-d512.toml) and the 274 M model
# (bench-memory.toml), one rank through the launcher.
bench_lora_vs_full() {
  local runs=$1 name cfg method
  for name in d512 270m; do
    cfg=configs/runs/bench-d512.toml
    [ $name = d512 ] || cfg=configs/runs/bench-memory.toml
    for method in full lora; do
      local extra=()
      [ $method = full ] || extra=("${LORA_ARGS[@]}")
      echo "bench: lora, $name, $method"
      launch 1 "$runs/$name.$method.log" -- "$BUILD/trainer/trainer" --config "$cfg" \
        --no-sweep-dir --output-dir "$runs/$name.$method" "${extra[@]}"
    done
  done
}

# Part 2: ftbench against TRL's SFTTrainer, the same HF model directory (random D512/L8), the
# same prompt/completion JSONL (tokenized once by ftbench's sentencepiece path; its token cache
# is TRL's input), seq_len, micro-batch, steps, LR, threads and dtype; FTB_LORA_ROUNDS (default
# 2) alternating rounds.
bench_lora_trl() {
  local runs=$1 data=$1/data pyd method cache
  pyd=$(bench_pydeps)
  mkdir -p "$data"
  echo "bench: lora, TRL: writing the data, the sentencepiece model and the HF model"
  "$PY" scripts/bench_trl.py data "$data" 400
  spm_train --input="$data/sft.txt" --model_prefix="$data/spm" --vocab_size=2000 --hard_vocab_limit=false \
    --model_type=unigram --num_threads=1 >"$data/spm_train.log" 2>&1
  "$PY" scripts/bench_hf_model.py configs/models/d512-l8.toml "$data/hf"
  local T=256 B=4 N=8 LR=1e-4 round
  local ft=(--config configs/runs/bench-d512.toml --no-sweep-dir model.from_pretrained="\"$data/hf\""
            data.source="\"$data/sft.jsonl\"" data.tokenizer="\"$data/spm.model\""
            data.prompt_field='"prompt"' data.completion_field='"completion"' data.padding='"longest"'
            data.seq_len=$T data.min_doc_len=0 training.micro_batch_size=$B training.max_steps=$N training.lr=$LR
            training.threads=1 metrics.skip_first_steps=2)
  for round in $(seq "${FTB_LORA_ROUNDS:-2}"); do
    for method in full lora; do
      local extra=() trl=()
      [ $method = full ] || { extra=("${LORA_ARGS[@]}"); trl=("${TRL_LORA_ARGS[@]}"); }
      echo "bench: lora, TRL round $round, $method: ftbench, then TRL SFTTrainer"
      launch 1 "$runs/sft.ftbench.$method.r$round.log" -- "$BUILD/trainer/trainer" "${ft[@]}" \
        "${extra[@]}" --output-dir "$runs/sft.ftbench.$method.r$round"
      cache=$(ls "$data"/sft.jsonl.tok-*.bin)
      launch 1 "$runs/sft.trl.$method.r$round.log" -- env PYTHONPATH="$pyd" "$PY" \
        scripts/bench_trl.py run --model "$data/hf" --tokens "$cache" --seq-len $T --batch $B \
        --steps $N --threads 1 --lr $LR "${trl[@]}" --out "$runs/sft.trl.$method.r$round.json"
    done
  done
}

bench_lora() {
  local runs=$OUT/runs/lora
  rm -rf "$runs"
  mkdir -p "$runs"
  cut -d' ' -f1-3 /proc/loadavg >"$runs/loadavg.before"
  bench_lora_vs_full "$runs"
  bench_lora_trl "$runs"
  cut -d' ' -f1-3 /proc/loadavg >"$runs/loadavg.after"
  "$PY" scripts/bench_lora_report.py "$runs" > "$OUT/lora.md"
  drop_checkpoints "$runs"
  rm -rf "$runs/data/hf" "$runs"/*.trl  # 230 MB of random weights; TRL's empty output dirs
  cat "$OUT/lora.md"
}

# pp 2 on one host, m = 8 micro-batches of 1 sample: the bubble each rank measured (time
# blocked receiving from the neighbour stage, and idle time over the pipeline's makespan)
# against the schedule's theory, 1F1B, interleaved (v = 2) and zero-bubble H1. Two
# vocabularies: 512, where
# the output layer is a small part of the last chunk (the theory's equal chunks), and
# Llama-2's 32000, where it is as heavy as 4.5 blocks.
bench_pipeline_bubble() {
  local runs=$1/bubble
  rm -rf "$runs"
  mkdir -p "$runs"
  local common=(--config configs/runs/bench-d512.toml --no-sweep-dir training.max_steps=6
    training.micro_batch_size=1 parallel.pp=2 parallel.pp_microbatches=8
    checkpoint.save_final=false)
  for vocab in 512 32000; do
    for sched in 1f1b interleaved_1f1b zb_h1; do
      local v=1
      [ "$sched" = interleaved_1f1b ] && v=2
      echo "bench: D512/L8/T512 fp32, vocabulary $vocab, pp 2, m 8: $sched"
      cut -d' ' -f1-3 /proc/loadavg >"$runs/$sched.v$vocab.loadavg"
      launch 2 "$runs/$sched.v$vocab.log" -- "$BUILD/trainer/trainer" "${common[@]}" \
        --output-dir "$runs/$sched.v$vocab" model.vocab_size=$vocab parallel.pp_schedule=$sched \
        parallel.pp_virtual_stages=$v
    done
  done
}

# The slow network: two namespace hosts (tests/cluster/netns.sh, on their own bridge and
# subnet so that the tests' hosts are untouched), each host's egress shaped by tc tbf to
# each rate of FTB_PP_RATES ("off" = unshaped); a 3-second TCP transfer checks the rate
# the shaped link delivers. At each rate D512/L8 fp32, global batch 8 x T512, one rank
# per host launched by mpirun + launcher: DDP, ZeRO-3 and pp 2 (1F1B, m = 8). The bytes
# each host sent come from its eth0 counters around each run.
PP_RATES=${FTB_PP_RATES:-100mbit 300mbit 1gbit 3gbit off}
bench_pipeline_net() {
  local runs=$1/net netns=$ROOT/tests/cluster/netns.sh
  rm -rf "$runs"
  mkdir -p "$runs"
  export FTB_NETNS_PREFIX=ftbpp FTB_NETNS_BRIDGE=ftbpp0 FTB_NETNS_NET=10.79.0
  if ! "$netns" check 2>"$runs/skipped"; then return 0; fi
  command -v mpirun >/dev/null || { echo "mpirun (OpenMPI) is not installed" >"$runs/skipped"; return 0; }
  rm -f "$runs/skipped"
  trap '"$ROOT/tests/cluster/netns.sh" down' EXIT
  "$netns" up 2
  printf 'ftbpp1 slots=1\nftbpp2 slots=1\n' >"$runs/hostfile"
  local rate layout
  for rate in $PP_RATES; do
    "$netns" shape "$rate"
    pp_link_rate "$rate" "$runs/link.$rate.json"
    for layout in ddp zero3 pp; do
      echo "bench: two hosts, link $rate: D512/L8/T512 fp32, global batch 8, $layout"
      pp_net_run "$runs" "$rate" "$layout"
    done
  done
  "$netns" shape off
  "$netns" down
  trap - EXIT
}

pp_tx_bytes() {  # the bytes each namespace host has sent on eth0
  for h in ftbpp1 ftbpp2; do ip netns exec $h cat /sys/class/net/eth0/statistics/tx_bytes; done
}

pp_link_rate() {  # pp_link_rate RATE OUT.json: 3 s of the nominal rate (2 GB unshaped)
  local bytes=2000000000
  case $1 in *mbit) bytes=$(( ${1%mbit} * 375000 )) ;; *gbit) bytes=$(( ${1%gbit} * 375000000 )) ;; esac
  ip netns exec ftbpp2 timeout 120 "$PY" scripts/bench_link_rate.py recv 5999 "$2" &
  local recv=$!
  ip netns exec ftbpp1 timeout 120 "$PY" scripts/bench_link_rate.py send 10.79.0.12 5999 "$bytes"
  wait $recv
}

pp_net_run() {  # pp_net_run RUNS RATE LAYOUT
  local out=$1/$2.$3 keys=()
  case $3 in
    ddp) keys=(training.micro_batch_size=4) ;;
    zero3) keys=(training.micro_batch_size=4 parallel.dp_shard=2 parallel.zero_stage=3) ;;
    pp) keys=(training.micro_batch_size=1 parallel.pp=2 parallel.pp_microbatches=8) ;;
  esac
  local trainer=("$BUILD/trainer/trainer" --config configs/runs/bench-d512.toml --no-sweep-dir
    --output-dir "$out" training.global_batch_size=8 training.max_steps=4
    metrics.skip_first_steps=1 checkpoint.save_final=false "${keys[@]}")
  local node=("$BUILD/launcher/launcher" --nproc-per-node 1 -- "${trainer[@]}")
  settle
  cut -d' ' -f1-3 /proc/loadavg >"$out.loadavg"
  pp_tx_bytes >"$out.tx_before"
  timeout -k 10 1800 "$ROOT/tests/cluster/netns.sh" mpirun --hostfile "$1/hostfile" \
    -np 1 --host ftbpp1 "${node[@]}" : -np 1 --host ftbpp2 "${node[@]}" >"$out.log" 2>&1 ||
    { tail -20 "$out.log" >&2; echo "bench: $out failed (log $out.log)" >&2; return 1; }
  pp_tx_bytes >"$out.tx_after"
}

# One pipeline transfer on each link transport between two ranks of this host: the round
# trip of 1 MiB (one micro-batch of D512 x T512 activations), local memory against Gloo,
# alternating (trainer/bench/p2p_cost.cpp).
bench_pipeline_link() {
  echo "bench: pipeline link, 1 MiB round trip, local memory and Gloo, 2 ranks"
  build_bench_program ftb_p2p_bench
  launch 2 "$1/link.log" -- "$BUILD/trainer/ftb_p2p_bench" --rounds 400
}

# FTB_PP_PARTS="bubble link net" (the default) runs every part; naming one reruns it alone
# and reports it beside the other parts' last runs.
bench_pipeline() {
  local runs=$OUT/runs/pipeline part
  mkdir -p "$runs"
  for part in ${FTB_PP_PARTS:-bubble link net}; do
    case $part in bubble | link | net) ;; *) echo "bench: FTB_PP_PARTS: unknown part '$part'; expected bubble, link or net" >&2; exit 2 ;; esac
    cut -d' ' -f1-3 /proc/loadavg >"$runs/loadavg.$part.before"
    "bench_pipeline_$part" "$runs"
    cut -d' ' -f1-3 /proc/loadavg >"$runs/loadavg.$part.after"
  done
  "$PY" scripts/bench_pipeline_report.py "$runs" > "$OUT/pipeline.md"
  drop_checkpoints "$runs"
  cat "$OUT/pipeline.md"
}

bench_tokenizer() {
  local runs=$OUT/runs/tokenizer
  rm -rf "$runs"
  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
    "$PY" scripts/bench_tokenizer.py "$runs" "$BUILD/trainer/trainer" "${FTB_TOK_ROUNDS:-3}" \
    > "$OUT/tokenizer.md"
  cat "$OUT/tokenizer.md"
}

# The exhaustive sweep of a space (scripts/sweep.sh, every point once), then `sweep_tagger
# tune` of it, each alone on the machine and timed, into RUNS.
tune_part() {  # tune_part RUNS SPACE EXHAUSTIVE (a function: EXHAUSTIVE SPACE RESULTS)
  local runs=$1 space=$2 exhaustive=$3 t0
  rm -rf "$runs"
  mkdir -p "$runs"
  echo "$space" >"$runs/space"
  date -u +%Y-%m-%d >"$runs/date"
  "$PY" -c 'import sys; sys.path.insert(0, "scripts"); import bench_common; print(bench_common.cpu_model())' >"$runs/cpu"
  nproc >"$runs/nproc"
  settle
  cut -d' ' -f1-3 /proc/loadavg >"$runs/load.exhaustive"
  echo "bench: tune: the exhaustive sweep of $space"
  t0=$(date +%s.%N)
  "$exhaustive" "$space" "$runs/exhaustive" >"$runs/exhaustive.log" 2>&1 ||
    echo "bench: tune: the exhaustive sweep had failed points (log $runs/exhaustive.log)" >&2
  awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }' >"$runs/exhaustive.wall"
  "$BUILD/sweep_tagger/sweep_tagger" aggregate "$runs/exhaustive" >"$runs/exhaustive.csv"
  settle
  cut -d' ' -f1-3 /proc/loadavg >"$runs/load.tune"
  echo "bench: tune: sweep_tagger tune $space"
  t0=$(date +%s.%N)
  FTB_BUILD_DIR=$BUILD "$BUILD/sweep_tagger/sweep_tagger" tune "$space" "$runs/tune" >"$runs/tune.out" 2>"$runs/tune.log" ||
    echo "bench: tune: sweep_tagger tune exited non-zero (log $runs/tune.log)" >&2
  awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }' >"$runs/tune.wall"
  cut -d' ' -f1-3 /proc/loadavg >"$runs/load.after"
  "$BUILD/sweep_tagger/sweep_tagger" aggregate "$runs/tune" --out "$runs/tune.csv"
}

tune_sweep() {  # tune_sweep SPACE RESULTS: scripts/sweep.sh (points of one node)
  FTB_BUILD_DIR=$BUILD scripts/sweep.sh "$1" "$2"
}

# Every point of SPACE once, each through mpirun on the hosts ftbtn1 and ftbtn2 (one launcher
# each), as the space's [machines] launch starts tune's runs.
tune_sweep_two_hosts() {  # tune_sweep_two_hosts SPACE RESULTS
  local tagger=$BUILD/sweep_tagger/sweep_tagger n i rc=0
  n=$("$tagger" expand "$1" --json | wc -l)
  for ((i = 0; i < n; i++)); do
    local args=() node
    mapfile -t args < <("$tagger" expand "$1" --index "$i" --json |
      "$PY" -c 'import json, sys; p = json.load(sys.stdin); print("\n".join([p["base"]] + p["args"]))')
    node=("$BUILD/launcher/launcher" --nproc-per-node 1 -- "$BUILD/trainer/trainer"
      --config "${args[0]}" "${args[@]:1}" "output.dir=$2")
    settle
    timeout -k 10 1800 tests/cluster/netns.sh mpirun --hostfile configs/tune/two_hosts.hostfile \
      -np 1 --host ftbtn1 "${node[@]}" : -np 1 --host ftbtn2 "${node[@]}" || rc=1
  done
  return $rc
}

# The same across two netns hosts whose link tc shapes to 100 Mbit/s.
tune_net() {  # tune_net RUNS
  local runs=$1 netns=$ROOT/tests/cluster/netns.sh
  export FTB_NETNS_PREFIX=ftbtn FTB_NETNS_BRIDGE=ftbtn0 FTB_NETNS_NET=10.78.0
  mkdir -p "$runs"
  if ! "$netns" check 2>"$runs/skipped"; then return 0; fi
  command -v mpirun >/dev/null || { echo "mpirun (OpenMPI) is not installed" >"$runs/skipped"; return 0; }
  rm -f "$runs/skipped"
  trap '"$ROOT/tests/cluster/netns.sh" down' EXIT
  "$netns" up 2
  "$netns" shape 100mbit
  tune_part "$runs" configs/tune/d512_two_hosts.toml tune_sweep_two_hosts
  "$netns" shape off
  "$netns" down
  trap - EXIT
}

# FTB_TUNE_PARTS="local net" (the default): two local ranks (configs/tune/d512_local.toml),
# two shaped netns hosts (configs/tune/d512_two_hosts.toml); naming one reruns it alone.
bench_tune() {
  local root=$OUT/runs/tune part
  for part in ${FTB_TUNE_PARTS:-local net}; do
    case $part in
      local) tune_part "$root/local" configs/tune/d512_local.toml tune_sweep ;;
      net) tune_net "$root/net" ;;
      *) echo "bench: FTB_TUNE_PARTS: unknown part '$part'; expected local or net" >&2; exit 2 ;;
    esac
  done
  "$PY" scripts/bench_tune_report.py "$root" >"$OUT/tune.md"
  cat "$OUT/tune.md"
}

# ftbench against a plain PyTorch training loop on one GPU (scripts/bench_gpu_reference.py: the
# same model, tokens, AdamW and clipping; eager, and with each block and the head under
# torch.compile), bf16, seq 2048, world 1, for each model of FTB_GPU_MODELS (default d2048, the
# D2048/L16 of scripts/gpu_check.py LARGE, and llama1b, a Llama-3.2-1B shape) and micro-batch of
# FTB_GPU_MB (default "1 2 4 8"). Per model: the tokens (a .bin the trainer writes); ftbench, one
# run per micro-batch; the eager loop, then the compiled loop, one process each over every
# micro-batch. Each micro-batch of each variant: GPU_WARMUP warm-up steps, then FTB_GPU_ROUNDS
# (default 3) rounds of FTB_GPU_STEPS (default 4) measured steps. Out of device memory = "does
# not fit"; a run past its timeout (10 min, 20 for a reference process) = failed. The report is
# rewritten after each part, and a stop signal (a caller's time limit) ends a trainer run within
# 2 s without a checkpoint (checkpoint.preempt_grace_s), so a benchmark cut short leaves the
# report of what it measured. FTB_PYTHON: a Python with PyTorch built with CUDA and h5py
# (default the project venv). Needs a build with trainer_cuda.
GPU_MODELS=${FTB_GPU_MODELS:-d2048 llama1b}
GPU_MB=${FTB_GPU_MB:-1 2 4 8}
GPU_ROUNDS=${FTB_GPU_ROUNDS:-3}
GPU_STEPS=${FTB_GPU_STEPS:-4}
GPU_WARMUP=2
GPU_LR=3e-4  # the trainer's default; tiny.toml, the config the runs start from, sets 1e-3
# Llama-3.2-1B's shape without its rope scaling (the trainer refuses rope_scaling): 1.24 B
# parameters, the output projection tied to the embedding.
GPU_LLAMA1B=(model.name=llama-3.2-1b-shape model.dim=2048 model.n_layers=16 model.n_heads=32
  model.n_kv_heads=8 model.ffn_dim=8192 model.vocab_size=128256 model.max_seq_len=2048
  model.rope_theta=500000.0 model.norm_eps=1e-5 model.tie_embeddings=true)

# gpu_part RUNS NAME START_SECONDS PYTHON: a line of elapsed.tsv and one on the terminal, and the
# report of what has run so far (a time limit that stops the benchmark leaves it)
gpu_part() {
  local s=$((SECONDS - $3))
  printf '%s\t%s\n' "$2" "$s" >>"$1/elapsed.tsv"
  echo "bench: gpu: $2: $s s"
  { "$4" scripts/bench_gpu_report.py "$1" >"$OUT/gpu.md.tmp" && mv "$OUT/gpu.md.tmp" "$OUT/gpu.md"; } ||
    echo "bench: gpu: the report failed (scripts/bench_gpu_report.py $1)" >&2
}

gpu_model_keys() {  # gpu_model_keys MODEL PYTHON: the model's model.* keys, one per line
  case $1 in
    d2048) "$2" -c 'import sys; sys.path.insert(0, "scripts"); from gpu_check import LARGE
print("\n".join(k for k in LARGE if k.startswith("model.")))' ;;
    llama1b) printf '%s\n' "${GPU_LLAMA1B[@]}" ;;
  esac
}

gpu_model() {  # gpu_model RUNS MODEL PYTHON
  local runs=$1 d=$1/$2 py=$3 t mb rc variant steps=$((GPU_WARMUP + GPU_ROUNDS * GPU_STEPS)) mbs keys
  read -ra mbs <<<"$GPU_MB"
  mkdir -p "$d"
  t=$SECONDS
  gpu_model_keys "$2" "$py" >"$d/model.keys"
  mapfile -t keys <"$d/model.keys"
  echo "bench: gpu: $2: the tokens"
  "$BUILD/trainer/trainer" --config configs/runs/tiny.toml "${keys[@]}" data.seq_len=2048 \
    data.min_doc_len=2048 data.num_samples=256 data.bin_dtype=uint32 \
    --generate-data "$d/tokens.bin" >"$d/tokens.log" 2>&1
  gpu_part "$runs" "$2 tokens" $t "$py"
  t=$SECONDS
  for mb in "${mbs[@]}"; do
    echo "bench: gpu: $2: ftbench, micro-batch $mb"
    rc=0
    OMP_NUM_THREADS=4 timeout -k 10 600 "$BUILD/trainer/trainer" --config configs/runs/tiny.toml \
      --no-sweep-dir --output-dir "$d/ftbench.mb$mb" "${keys[@]}" data.source="$d/tokens.bin" \
      data.bin_dtype=uint32 data.seq_len=2048 training.device=cuda training.dtype=bf16 \
      training.micro_batch_size="$mb" training.max_steps=$steps training.lr=$GPU_LR \
      metrics.skip_first_steps=$GPU_WARMUP metrics.log_every=$steps metrics.gemm_probe=false \
      checkpoint.save_final=false checkpoint.preempt_grace_s=2 >"$d/ftbench.mb$mb.log" 2>&1 ||
      rc=$?
    echo $rc >"$d/ftbench.mb$mb.rc"
  done
  gpu_part "$runs" "$2 ftbench" $t "$py"
  for variant in eager compiled; do
    echo "bench: gpu: $2: the $variant loop, micro-batches $GPU_MB"
    local flag=()
    [ $variant = eager ] || flag=(--compile)
    t=$SECONDS
    rc=0
    timeout -k 10 1200 "$py" scripts/bench_gpu_reference.py --model "${keys[@]}" \
      --tokens "$d/tokens.bin" --bin-dtype uint32 --seq 2048 --batch "${mbs[@]}" \
      --warmup $GPU_WARMUP --steps "$GPU_STEPS" --rounds "$GPU_ROUNDS" --lr $GPU_LR "${flag[@]}" \
      --out "$d/$variant.json" >"$d/$variant.log" 2>&1 || rc=$?
    echo $rc >"$d/$variant.rc"
    gpu_part "$runs" "$2 $variant" $t "$py"
  done
  rm -f "$d/tokens.bin"
}

bench_gpu() {
  local runs=$OUT/runs/gpu py=${FTB_PYTHON:-$PY} t0=$SECONDS model
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench: gpu: no GPU visible (nvidia-smi -L failed); run it on a machine with one" >&2
    exit 2
  fi
  if [ ! -x "$BUILD/trainer/trainer_cuda" ]; then
    echo "bench: gpu: $BUILD/trainer has no trainer_cuda: build against a libtorch with CUDA (FTB_BUILD_DIR)" >&2
    exit 2
  fi
  if ! "$py" -c 'import h5py, torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "bench: gpu: $py lacks PyTorch with CUDA or h5py; set FTB_PYTHON to a Python that has them" >&2
    exit 2
  fi
  for model in $GPU_MODELS; do
    case $model in d2048 | llama1b) ;; *) echo "bench: FTB_GPU_MODELS: unknown model '$model'; expected d2048 or llama1b" >&2; exit 2 ;; esac
  done
  for n in $GPU_MB $GPU_STEPS $GPU_ROUNDS; do
    [[ $n =~ ^[1-9][0-9]*$ ]] ||
      { echo "bench: gpu: FTB_GPU_MB, FTB_GPU_STEPS and FTB_GPU_ROUNDS take positive integers, got '$n'" >&2; exit 2; }
  done
  rm -rf "$runs"
  mkdir -p "$runs"
  nvidia-smi -q >"$runs/nvidia-smi.txt"
  date -u '+%Y-%m-%d %H:%M UTC' >"$runs/date"
  echo "$GPU_WARMUP $GPU_STEPS $GPU_ROUNDS" >"$runs/steps"
  echo "$GPU_MODELS" >"$runs/models"
  echo "$GPU_MB" >"$runs/micro_batches"
  for model in $GPU_MODELS; do
    gpu_model "$runs" "$model" "$py"
  done
  gpu_part "$runs" total $t0 "$py"
  cat "$OUT/gpu.md"
}

for b in "${which[@]}"; do
  case "$b" in
    trainer) bench_trainer ;;
    eager) bench_eager ;;
    dpscale) bench_dpscale ;;
    memory) bench_memory ;;
    nf4) bench_nf4 ;;
    data) bench_data ;;
    hfload) bench_hfload ;;
    textdata) bench_textdata ;;
    ckpt) bench_ckpt ;;
    port) bench_port ;;
    lora) bench_lora ;;
    gloo) "$PY" scripts/bench_gloo.py > "$OUT/gloo.md" && cat "$OUT/gloo.md" ;;
    pipeline) bench_pipeline ;;
    tokenizer) bench_tokenizer ;;
    tune) bench_tune ;;
    gpu) bench_gpu ;;
    launcher) scripts/bench_launcher.sh ;;
    aggregate) if [ -x scripts/bench_aggregate.sh ]; then scripts/bench_aggregate.sh; else echo "bench: aggregate benchmark not available yet" >&2; fi ;;
    *) echo "bench: unknown benchmark '$b'; expected trainer, eager, dpscale, memory, launcher, aggregate, data, hfload, textdata, ckpt, port, gloo, lora, nf4, pipeline, tokenizer, tune or gpu (see the list at the top of scripts/bench.sh)" >&2; exit 2 ;;
  esac
done
