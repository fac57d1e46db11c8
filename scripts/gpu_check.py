#!/usr/bin/env python3
"""The GPU acceptance run (scripts/gpu_check.sh): the trainer on one CUDA device against the
trainer on the CPU, on a machine with one GPU.

Checks (each prints PASS or FAIL with its figures; the report goes to --report):
  kernels     the fused CUDA kernels (RMSNorm, RoPE, SwiGLU, cross-entropy; trainer_cuda's
              default, training.cuda_kernels = "fused") against their composed ATen forms,
              forward and backward, fp32 within 1e-5 and bf16 within 1e-2, and bit-identical
              when repeated: <build>/tests/fused_cuda_tests (tests/gpu/fused_cuda_test.cpp)
              with FTB_REQUIRE_GPU=1, so a missing GPU fails instead of skipping; not run
              with --device cpu
  parity      tiny model, fp32, world 1: CUDA losses equal CPU losses within 1e-4 (relative);
              bf16 on CUDA trains like bf16 on the CPU (within 2e-2; both round to bf16)
  layouts     world 2 on the one GPU over Gloo (tensors staged through the CPU): DDP, ZeRO-3
              and TP 2 equal CUDA world 1 within 1e-4
  nccl        world 2 over NCCL on the one GPU: NCCL refuses two ranks on one GPU, so this
              records what it said; it passes when the run either completes with world-1
              losses or exits with NCCL's own refusal (not a hang, not a crash)
  checkpoint  saved on the GPU at step 10 and resumed on the CPU, and the other way round:
              the resumed losses equal the uninterrupted run's within 1e-4
  hf_import   an HF export loaded with model.from_pretrained straight onto the GPU: losses
              equal the same import on the CPU within 1e-4
  lora        LoRA (rank 8, every projection, dropout 0.1) on the GPU equals the CPU within 1e-4
  memory      training.optimizer_in_backward equals the ordinary step on the GPU (1e-6), and
              training.device_memory_limit_gb caps the allocator: D2048 fits 40 GB, ends as
              oom (exit 5, /status) under 4 GB; bf16 weights without fp32 masters
              (stochastic, Kahan) against fp32 masters over 200 steps of D512/L8;
              training.activation_offload = "host" keeps the losses and lowers the D2048 peak;
              training.optimizer_offload = "host" keeps the losses (1e-5) and lowers the D2048
              peak by at least 80 % of the AdamW moments
  graphs      training.cuda_graphs: the tiny fp32 run replayed from a CUDA graph equals the
              eager run on the GPU within 1e-5, and D2048 at micro-batch 2 with and without
              graphs (tokens/s); not run with --device cpu
  nf4         LoRA on an NF4 base (lora.base_dtype = "nf4": quantized and dequantized with ATen
              ops on the device) on the GPU equals the CPU within 1e-4
  seven_b     a Llama-2-7B shape at seq 4096 under a 24 GB cap (bf16 weights, Adafactor inside
              backward, checkpointing, offload): 10 steps, allocator peak against the estimate
              (10 %); AdamW with stored gradients ends as oom; QLoRA (NF4) under 12 GB runs
  large       a D2048 model (16 layers, GQA) in bf16 at micro-batch 2, 4 and 8: tokens/s, MFU
              against the GPU's dense bf16 peak, GEMM efficiency, and the CUDA caching
              allocator's peaks against the memory estimator (--estimate-memory without its
              host runtime baseline)

--device cpu runs the same script with the CPU in place of the GPU (a check of the script
itself on a machine without one; its figures say nothing of a GPU).
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "runs" / "tiny.toml"
LARGE = ["model.name=d2048-l16", "model.dim=2048", "model.n_layers=16", "model.n_heads=16",
         "model.n_kv_heads=8", "model.ffn_dim=5632", "model.vocab_size=32000",
         "model.max_seq_len=2048", "data.seq_len=2048", "data.num_samples=4096",
         "training.micro_batch_size=4", "training.dtype=\"bf16\"", "training.max_steps=12",
         "metrics.skip_first_steps=4", "metrics.log_every=4"]


class Check:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work)
        self.results = []  # (name, ok, text)

    # ------------------------------------------------------------------ running

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        env.setdefault("OMP_NUM_THREADS", "4")
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def cmd(self, out, overrides, config=TINY):
        return [self.args.trainer, "--config", str(config), "--output-dir", str(out),
                "--no-sweep-dir", *overrides]

    def run(self, name, overrides, config=TINY, timeout=300):
        out = self.work / name
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.time()
        p = subprocess.run(self.cmd(out, overrides, config), env=self.env(), capture_output=True,
                           text=True, timeout=timeout)
        (self.work / f"{name}.log").write_text(p.stdout + p.stderr)
        if p.returncode != 0:
            raise RuntimeError(f"{name}: trainer exited {p.returncode} after {time.time() - t0:.0f} s:"
                               f"\n{tail(p.stdout + p.stderr)}")
        return out, p.stdout + p.stderr

    def run_status(self, name, overrides, timeout=600):
        """A run expected to end otherwise than completed: its exit code and /status attrs."""
        out = self.work / name
        shutil.rmtree(out, ignore_errors=True)
        p = subprocess.run(self.cmd(out, overrides), env=self.env(), capture_output=True,
                           text=True, timeout=timeout)
        (self.work / f"{name}.log").write_text(p.stdout + p.stderr)
        with h5py.File(out / "metrics" / "rank_00000.h5", "r") as f:
            return p.returncode, dict(f["status"].attrs)

    def run_world(self, name, world, overrides, timeout=180):
        """`world` ranks started by hand with the torchrun variables (one machine)."""
        out = self.work / name
        shutil.rmtree(out, ignore_errors=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(self.cmd(out, overrides), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  env=self.env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world,
                                               LOCAL_WORLD_SIZE=world, MASTER_ADDR="127.0.0.1",
                                               MASTER_PORT=port))
                 for r in range(world)]
        logs, codes = [], []
        deadline = time.time() + timeout
        for p in procs:
            try:
                o, _ = p.communicate(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                o, _ = p.communicate()
                codes.append("timeout")
                logs.append(o)
                continue
            codes.append(p.returncode)
            logs.append(o)
        (self.work / f"{name}.log").write_text("\n".join(logs))
        return out, codes, "\n".join(logs)

    def record(self, name, ok, text):
        self.results.append((name, bool(ok), text))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)

    def attempt(self, name, fn):
        try:
            fn()
        except Exception as e:  # a check that cannot run is a failed check, with its reason
            self.record(name, False, f"{type(e).__name__}: {e}")

    # ------------------------------------------------------------------ checks

    def dev(self):
        return f'training.device="{self.args.device}"'

    def on_both(self, name, overrides):
        """One run on the CPU (cpu_<name>) and on the device (gpu_<name>): their folders and the
        max relative difference of their losses."""
        cpu, _ = self.run(f"cpu_{name}", ['training.device="cpu"', *overrides])
        gpu, _ = self.run(f"gpu_{name}", [self.dev(), *overrides])
        return cpu, gpu, rel_err(losses(gpu), losses(cpu))

    def kernels(self):
        binary = Path(self.args.trainer).resolve().parents[1] / "tests" / "fused_cuda_tests"
        p = subprocess.run([str(binary), "--gtest_brief=1"], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "FTB_REQUIRE_GPU": "1"})
        passed = re.search(r"\[  PASSED  \] (\d+) test", p.stdout)
        self.record("fused CUDA kernels", p.returncode == 0,
                    f"{binary.name}: exit {p.returncode}, "
                    f"{passed.group(1) if passed else 0} test(s) passed"
                    + ("" if p.returncode == 0 else f":\n{tail(p.stdout + p.stderr)}"))

    def parity(self):
        fp32 = ["training.fp32_gemm=\"aten\"", "checkpoint.interval=10", "checkpoint.keep_last=0"]
        cpu, gpu, err = self.on_both("fp32", fp32)
        self.record("parity fp32", err <= 1e-4,
                    f"tiny model, 20 steps: max relative loss difference {err:.2e} (bound 1e-4); "
                    f"losses {fmt(losses(gpu)[[0, -1]])} on {device_of(gpu)}, "
                    f"{fmt(losses(cpu)[[0, -1]])} on the CPU")
        _, gpu_b, err = self.on_both("bf16", ['training.dtype="bf16"'])
        falls = losses(gpu_b)[-1] < losses(gpu_b)[0]
        self.record("parity bf16", err <= 2e-2 and falls,
                    f"max relative loss difference {err:.2e} (bound 2e-2), loss "
                    f"{fmt(losses(gpu_b)[[0, -1]])}")

    def layouts(self):
        ref = losses(self.work / "gpu_fp32")
        worst = []
        for name, ov in (("ddp", ["parallel.dp_shard=1", "training.micro_batch_size=1"]),
                         ("zero3", ["parallel.dp_shard=2", "parallel.zero_stage=3",
                                    "training.micro_batch_size=1"]),
                         ("tp2", ["parallel.tp=2", "training.micro_batch_size=2"])):
            dev = f'training.device="{self.args.device}:0"' if self.args.device == "cuda" else self.dev()
            out, codes, log = self.run_world(f"w2_{name}", 2, [dev, 'parallel.backend="gloo"',
                                                               'training.fp32_gemm="aten"', *ov])
            if codes != [0, 0]:
                raise RuntimeError(f"{name}: exit codes {codes}:\n{tail(log)}")
            worst.append((name, rel_err(losses(out), ref)))
        ok = all(e <= 1e-4 for _, e in worst)
        self.record("layouts world 2 (gloo, one GPU)", ok,
                    ", ".join(f"{n} {e:.2e}" for n, e in worst) + " max relative loss difference "
                    "against world 1 (bound 1e-4)")

    def nccl(self):
        if self.args.device != "cuda":
            self.record("nccl world 2", True, "skipped: --device cpu")
            return
        out, codes, log = self.run_world("w2_nccl", 2, ['training.device="cuda:0"',
                                                        'parallel.backend="nccl"',
                                                        "parallel.timeout_seconds=30",
                                                        "parallel.dp_shard=1",
                                                        "training.micro_batch_size=1"],
                                         timeout=90)
        if codes == [0, 0]:
            err = rel_err(losses(out), losses(self.work / "gpu_fp32"))
            self.record("nccl world 2", err <= 1e-4,
                        f"two ranks on one GPU completed; max relative loss difference {err:.2e}")
            return
        said = [l for l in log.splitlines() if re.search(r"nccl|NCCL|Duplicate GPU", l)
                and not l.startswith("frame #")]
        clean = not any(l.startswith("frame #") for l in log.splitlines())
        self.record("nccl world 2", "timeout" not in codes and all(c not in (-11, 139) for c in codes)
                    and clean,
                    f"exit codes {codes} ({'no' if clean else 'WITH a'} C++ backtrace); NCCL said: "
                    f"{' / '.join(l[:200] for l in said[-3:]) if said else '(nothing)'}")

    def checkpoint(self):
        cpu_ref, gpu_ref = self.work / "cpu_fp32", self.work / "gpu_fp32"
        step = "checkpoints/step_00000010"
        to_cpu, _ = self.run("gpu_to_cpu", ['training.device="cpu"', "training.fp32_gemm=\"aten\"",
                                            f"checkpoint.resume={gpu_ref / step}"])
        to_gpu, _ = self.run("cpu_to_gpu", [self.dev(), "training.fp32_gemm=\"aten\"",
                                            f"checkpoint.resume={cpu_ref / step}"])
        e1 = rel_err(losses(to_cpu), losses(gpu_ref)[10:])
        e2 = rel_err(losses(to_gpu), losses(cpu_ref)[10:])
        self.record("checkpoint across devices", e1 <= 1e-4 and e2 <= 1e-4,
                    f"GPU step 10 -> CPU: {e1:.2e}; CPU step 10 -> GPU: {e2:.2e} max relative "
                    "loss difference against the uninterrupted run (bound 1e-4)")

    def hf_import(self):
        hf = self.work / "hf_export"
        shutil.rmtree(hf, ignore_errors=True)
        p = subprocess.run([self.args.trainer, "export", "--checkpoint",
                            str(self.work / "cpu_fp32" / "checkpoints"), "--out", str(hf)],
                           env=self.env(), capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"export exited {p.returncode}: {tail(p.stdout + p.stderr)}")
        ov = [f"model.from_pretrained={hf}", "training.max_steps=5", "training.fp32_gemm=\"aten\""]
        _, gpu, err = self.on_both("hf", ov)
        self.record("hf import onto the device", err <= 1e-4,
                    f"5 steps from the export: max relative loss difference {err:.2e} (bound "
                    f"1e-4); first loss {losses(gpu)[0]:.5f}")

    def lora(self):
        ov = ["lora.rank=8", 'lora.targets="all"', "lora.dropout=0.1", "training.lr=1e-2",
              'training.fp32_gemm="aten"']
        _, gpu, err = self.on_both("lora", ov)
        self.record("lora", err <= 1e-4,
                    f"rank 8 on every projection, dropout 0.1 (masks drawn alike on both devices): "
                    f"max relative loss difference {err:.2e} (bound 1e-4), loss "
                    f"{fmt(losses(gpu)[[0, -1]])}")

    def nf4(self):
        ov = ["lora.rank=8", 'lora.targets="all"', 'lora.base_dtype="nf4"', "training.lr=1e-2",
              'training.fp32_gemm="aten"']
        _, gpu, err = self.on_both("nf4", ov)
        self.record("nf4", err <= 1e-4,
                    f"rank 8 on every projection of an NF4 base: max relative loss difference "
                    f"{err:.2e} (bound 1e-4), loss {fmt(losses(gpu)[[0, -1]])}")

    def large(self):
        """The D2048 model at micro-batch 2, 4 and 8: one table row each."""
        self.table = []
        for mb in (4, 2, 8):
            ov = [self.dev(), *LARGE, f"training.micro_batch_size={mb}",
                  *self.args.large_overrides.split()]
            est = subprocess.run(self.cmd(self.work / "est", ov) + ["--estimate-memory"],
                                 env=self.env(), capture_output=True, text=True, timeout=120)
            out, _ = self.run(f"large_bf16_mb{mb}", ov + ["checkpoint.save_final=false"], timeout=600)
            with h5py.File(out / "metrics" / "rank_00000.h5", "r") as f:
                a = dict(f.attrs)
                s = f["steps"]
                keep = slice(4, None)
                row = {"micro_batch": mb,
                       "tokens_per_s": float(np.median(s["tokens_per_s_padded"][keep])),
                       "mfu": float(np.median(s["mfu"][keep])),
                       "mfu_causal": float(np.median(s["mfu_causal"][keep])),
                       "hfu": float(np.median(s["hfu"][keep])),
                       "gemm_efficiency": float(np.median(s["gemm_efficiency"][keep])),
                       "step_s": float(np.median(s["step_time_s"][keep])),
                       "optimizer_share": float(np.median(s["optimizer_s"][keep] / s["step_time_s"][keep])),
                       "peak_allocated": float(a.get("device_peak_allocated_bytes", -1)),
                       "peak_reserved": float(a.get("device_peak_reserved_bytes", -1)),
                       "estimate": estimated_device_bytes(est.stdout)}
            self.table.append(row)
            if mb == 4:
                self.figures = {**row, "device": str(a.get("device")),
                                "peak_source": str(a.get("peak_source")),
                                "gemm_source": str(a.get("gemm_source")),
                                "gemm_flops": float(a.get("gemm_flops", 0))}
        r = self.figures
        text = (f"D2048/L16 GQA, micro-batch 4 x 2048, {r['device']}: {r['tokens_per_s']:.0f} tokens/s, "
                f"MFU {100 * r['mfu']:.1f} % of {r['peak_source']}, GEMM efficiency "
                f"{100 * r['gemm_efficiency']:.1f} % of {r['gemm_flops'] / 1e12:.1f} TFLOP/s "
                f"({r['gemm_source']}); allocator peak {mib(r['peak_allocated'])} allocated / "
                f"{mib(r['peak_reserved'])} reserved, estimate {mib(r['estimate'])} "
                f"({ratio(r['estimate'], r['peak_allocated'])} of the allocated peak)")
        ok = all(t["tokens_per_s"] > 0 and t["peak_allocated"] > 0 and t["estimate"] > 0
                 for t in self.table)
        self.record("large bf16", ok, text)

    def graphs(self):
        """training.cuda_graphs: the tiny fp32 run replayed from a CUDA graph equals the eager
        run on the device (1e-5: the same kernels in the same order), and the D2048 model at
        micro-batch 2 with and without graphs (tokens/s, steps 4 on)."""
        base = [self.dev(), "training.fp32_gemm=\"aten\"", "checkpoint.interval=10",
                "checkpoint.keep_last=0"]
        eager, _ = self.run("gpu_eager_fp32", base)
        graph, _ = self.run("gpu_graph_fp32", [*base, "training.cuda_graphs=true"])
        err = rel_err(losses(graph), losses(eager))
        speed = {}
        for on in ("false", "true"):
            ov = [self.dev(), *LARGE, "training.micro_batch_size=2", f"training.cuda_graphs={on}",
                  "checkpoint.save_final=false", *self.args.large_overrides.split()]
            out, _ = self.run(f"large_graphs_{on}", ov, timeout=600)
            with h5py.File(out / "metrics" / "rank_00000.h5", "r") as f:
                speed[on] = float(np.median(f["steps"]["tokens_per_s_padded"][4:]))
        self.record("cuda graphs", err <= 1e-5,
                    f"tiny fp32, 20 steps: max relative loss difference {err:.2e} against the "
                    f"eager run (bound 1e-5); D2048 bf16 micro-batch 2: {speed['true']:.0f} "
                    f"tokens/s replayed, {speed['false']:.0f} eager "
                    f"({ratio(speed['true'], speed['false'])})")

    def memory(self):
        """The optimizer step inside backward equals the ordinary step on the device, and
        training.device_memory_limit_gb caps the caching allocator: the D2048 model fits 40 GB
        (reserved peak below the cap) and ends as oom (exit 5, /status oom) under 4 GB."""
        ov = ["training.max_grad_norm=0", "checkpoint.interval=0"]
        ref, _ = self.run("gpu_step", [self.dev(), *ov])
        oib, _ = self.run("gpu_in_backward", [self.dev(), *ov, "training.optimizer_in_backward=true"])
        err = rel_err(losses(oib), losses(ref))
        self.record("optimizer in backward", err <= 1e-6,
                    f"tiny, AdamW, 20 steps: max relative loss difference {err:.2e} against the "
                    "ordinary step (bound 1e-6)")
        if self.args.device == "cpu":
            self.record("device memory cap", True, "skipped: --device cpu (a GPU's allocator)")
            return
        self.bf16_weights()
        self.activation_offload()
        self.optimizer_offload()
        big = [self.dev(), *LARGE, "training.max_steps=4", "metrics.skip_first_steps=1",
               "checkpoint.save_final=false", *self.args.large_overrides.split()]
        fits, _ = self.run("cap_40", big + ["training.device_memory_limit_gb=40"], timeout=600)
        with h5py.File(fits / "metrics" / "rank_00000.h5", "r") as f:
            reserved = float(f.attrs.get("device_peak_reserved_bytes", -1))
        rc, st = self.run_status("cap_4", big + ["training.device_memory_limit_gb=4"])
        ok = 0 < reserved <= 40 * 2**30 and rc == 5 and st.get("state") == "oom"
        self.record("device memory cap", ok,
                    f"D2048 under 40 GB: reserved peak {mib(reserved)}; under 4 GB: exit "
                    f"{rc}, status {st.get('state')}: {str(st.get('message'))[:160]}")

    def seven_b(self):
        """A Llama-2-7B shape, seq 4096, micro-batch 1, under a 24 GB cap: bf16 weights without
        masters, Adafactor inside backward, full checkpointing and activation offload run 10 steps,
        the allocator peak within 10 % of the estimate; the same with AdamW and stored gradients
        ends as oom (exit 5, /status oom); QLoRA (NF4 base, rank 16) under a 12 GB cap runs."""
        if self.args.device == "cpu":
            self.record("7B under 24 GB", True, "skipped: --device cpu")
            return
        shape = [self.dev(), 'model.name="llama-2-7b"', "data.seq_len=4096", "data.num_samples=64",
                 "training.micro_batch_size=1", 'training.dtype="bf16"', "training.max_steps=10",
                 "metrics.skip_first_steps=2", "checkpoint.interval=0", "checkpoint.save_final=false",
                 'training.activation_checkpointing="full"']
        recipe = shape + ["training.device_memory_limit_gb=24", 'training.master_weights="none"',
                          'training.optimizer="adafactor"', "training.optimizer_in_backward=true",
                          "training.max_grad_norm=0", 'training.activation_offload="host"']
        est = subprocess.run(self.cmd(self.work / "est7b", recipe) + ["--estimate-memory"],
                             env=self.env(), capture_output=True, text=True, timeout=120)
        out, _ = self.run("seven_b", recipe, timeout=900)
        with h5py.File(out / "metrics" / "rank_00000.h5", "r") as f:
            peak = float(f.attrs.get("device_peak_allocated_bytes", -1))
            tps = float(np.median(f["steps"]["tokens_per_s_padded"][2:]))
        estimate = estimated_device_bytes(est.stdout)
        adam = [a for a in recipe if "optimizer" not in a and "max_grad_norm" not in a]
        rc, st = self.run_status("seven_b_adamw", adam)
        qlora = shape + ["training.device_memory_limit_gb=12", "lora.rank=16", "lora.alpha=32",
                         'lora.targets="all"', 'lora.base_dtype="nf4"']
        self.run("seven_b_qlora", qlora, timeout=900)
        ok = abs(estimate - peak) <= 0.10 * peak and rc == 5 and st.get("state") == "oom"
        self.record("7B under 24 GB", ok,
                    f"recipe: 10 steps, {tps:.0f} tokens/s, allocator peak {mib(peak)}, estimate "
                    f"{mib(estimate)} ({ratio(estimate, peak)}); AdamW with stored gradients: exit "
                    f"{rc}, status {st.get('state')}; QLoRA under 12 GB: completed")

    def activation_offload(self):
        """training.activation_offload = "host": the same losses as keeping the checkpointed
        inputs on the GPU, and D2048 at micro-batch 8 with the allocator peak lower by about the
        inputs' bytes (16 blocks x 8 x 2048 x 2048 bf16 = 1 GiB)."""
        ck = [self.dev(), 'training.activation_checkpointing="full"', "checkpoint.interval=0"]
        kept, _ = self.run("gpu_ckpt_kept", ck)
        moved, _ = self.run("gpu_ckpt_offload", ck + ['training.activation_offload="host"'])
        err = rel_err(losses(moved), losses(kept))
        big = [self.dev(), *LARGE, "training.micro_batch_size=8", "training.max_steps=4",
               "metrics.skip_first_steps=1", "checkpoint.save_final=false",
               'training.activation_checkpointing="full"']
        peaks = {}
        for name, extra in (("kept", []), ("offload", ['training.activation_offload="host"'])):
            out, _ = self.run(f"large_ckpt_{name}", big + extra, timeout=600)
            with h5py.File(out / "metrics" / "rank_00000.h5", "r") as f:
                peaks[name] = float(f.attrs.get("device_peak_allocated_bytes", -1))
        drop = peaks["kept"] - peaks["offload"]
        self.record("activation offload", err == 0 and drop > 0.5 * 2**30,
                    f"tiny: max relative loss difference {err:.2e} (expected 0: the same bits); "
                    f"D2048 mb 8 allocator peak {mib(peaks['kept'])} kept, "
                    f"{mib(peaks['offload'])} offloaded (drop {mib(drop)}, the inputs are 1024 MiB)")

    def optimizer_offload(self):
        """training.optimizer_offload = "host": the tiny model's losses equal the on-device step's
        within 1e-5 (the host's AdamW kernel rounds as the CPU does, the device's fused one as the
        GPU does), and D2048 (886 M parameters, AdamW) has an allocator peak lower by at least 80 %
        of its two fp32 moments (8 bytes per parameter, 6.6 GiB)."""
        ov = [self.dev(), "checkpoint.interval=0"]
        ref, _ = self.run("gpu_opt_device", ov)
        off, _ = self.run("gpu_opt_host", ov + ['training.optimizer_offload="host"'])
        err = rel_err(losses(off), losses(ref))
        big = [self.dev(), *LARGE, "training.micro_batch_size=2", "training.max_steps=4",
               "metrics.skip_first_steps=1", "checkpoint.save_final=false"]
        peaks, tps = {}, {}
        for name, extra in (("device", []), ("host", ['training.optimizer_offload="host"'])):
            out, _ = self.run(f"large_opt_{name}", big + extra, timeout=600)
            with h5py.File(out / "metrics" / "rank_00000.h5", "r") as f:
                peaks[name] = float(f.attrs.get("device_peak_allocated_bytes", -1))
                tps[name] = float(np.median(f["steps"]["tokens_per_s_padded"][1:]))
        moments = 8.0 * 886e6
        drop = peaks["device"] - peaks["host"]
        self.record("optimizer offload", err <= 1e-5 and drop >= 0.8 * moments,
                    f"tiny: max relative loss difference {err:.2e} (bound 1e-5); D2048 mb 2 allocator "
                    f"peak {mib(peaks['device'])} on the device, {mib(peaks['host'])} offloaded "
                    f"(drop {mib(drop)}; the moments are {mib(moments)}); tokens/s "
                    f"{tps['device']:.0f} -> {tps['host']:.0f}")

    def bf16_weights(self):
        """D512/L8 (configs/runs/bench-d512.toml), bf16, 200 steps: bf16 weights without fp32
        masters (stochastic rounding, Kahan) against fp32 masters."""
        d512 = ROOT / "configs" / "runs" / "bench-d512.toml"
        ov = [self.dev(), 'training.dtype="bf16"', "training.max_steps=200", "metrics.log_every=20",
              "checkpoint.interval=0", "checkpoint.save_final=false"]
        ref, _ = self.run("d512_masters", ov, config=d512)
        parts, ok = [], True
        for name, extra in (("stochastic", []), ("kahan", ['training.bf16_update="kahan"'])):
            out, _ = self.run(f"d512_{name}", ov + ['training.master_weights="none"', *extra],
                              config=d512)
            err = rel_err(losses(out), losses(ref))
            tail_gap = float(np.mean(losses(out)[-20:]) - np.mean(losses(ref)[-20:]))
            ok = ok and err <= 2e-2
            parts.append(f"{name}: max relative difference {err:.2e}, mean of the last 20 losses "
                         f"{tail_gap:+.4f} against fp32 masters")
        self.record("bf16 weights D512 200 steps", ok,
                    "; ".join(parts) + f" (bound 2e-2); fp32 masters end at {losses(ref)[-1]:.4f}")

    # ------------------------------------------------------------------ report

    def report(self):
        lines = [f"# GPU check ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
                 f"device: {self.args.device} ({gpu_name(self.work)}), trainer {self.args.trainer}",
                 ""]
        lines += [f"- {'PASS' if ok else 'FAIL'} **{n}**: {t}" for n, ok, t in self.results]
        if getattr(self, "table", None):
            lines += ["", "D2048/L16 GQA (886 M parameters), bf16, seq 2048, world 1, medians of "
                      "steps 4-11:", "",
                      "| micro-batch | tokens/s | MFU (6N+12·L·H·hd·T) | MFU causal | HFU | "
                      "GEMM eff. | step s | optimizer share | "
                      "peak allocated | peak reserved | estimate / allocated |",
                      "|---|---|---|---|---|---|---|---|---|---|---|"]
            lines += [f"| {t['micro_batch']} | {t['tokens_per_s']:.0f} | {100 * t['mfu']:.1f} % | "
                      f"{100 * t['mfu_causal']:.1f} % | {100 * t['hfu']:.1f} % | "
                      f"{100 * t['gemm_efficiency']:.1f} % | {t['step_s']:.3f} | "
                      f"{100 * t['optimizer_share']:.0f} % | {mib(t['peak_allocated'])} | "
                      f"{mib(t['peak_reserved'])} | {ratio(t['estimate'], t['peak_allocated'])} |"
                      for t in sorted(self.table, key=lambda t: t["micro_batch"])]
        Path(self.args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(self.args.report).write_text("\n".join(lines) + "\n")
        with open(Path(self.args.report).with_suffix(".json"), "w") as f:
            json.dump({"results": [(n, bool(ok), t) for n, ok, t in self.results],
                       "figures": getattr(self, "figures", {}), "table": getattr(self, "table", [])},
                      f, indent=1)


def tail(text, n=15):
    return "\n".join(text.strip().splitlines()[-n:])


def losses(out):
    with h5py.File(Path(out) / "metrics" / "rank_00000.h5", "r") as f:
        return np.array(f["steps/loss"][:], dtype=np.float64)


def device_of(out):
    with h5py.File(Path(out) / "metrics" / "rank_00000.h5", "r") as f:
        return str(f.attrs.get("device"))


def gpu_name(work):
    for run in ("large_bf16", "gpu_fp32"):
        try:
            with h5py.File(work / run / "metrics" / "rank_00000.h5", "r") as f:
                return str(f.attrs.get("gemm_source")).split("(")[1].split(")")[0]
        except (OSError, IndexError):
            continue
    return "unknown"


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise RuntimeError(f"loss series of different lengths: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b) / np.abs(b)))


def estimated_device_bytes(text):
    """--estimate-memory's total without its runtime baseline (host memory, not the GPU's)."""
    gib = {}
    for line in text.splitlines():
        m = re.match(r"\s+(.+?)\s{2,}([0-9.]+) GiB", line)
        if m:
            gib[m.group(1)] = float(m.group(2))
    if "total (no checkpointing)" not in gib or "runtime baseline" not in gib:
        return -1
    return (gib["total (no checkpointing)"] - gib["runtime baseline"]) * 2**30


def mib(b):
    return f"{b / 2**20:.0f} MiB" if b and b > 0 else "n/a"


def ratio(a, b):
    return f"{a / b:.2f}x" if a > 0 and b > 0 else "n/a"


def fmt(v):
    return "/".join(f"{x:.4f}" for x in v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--work", required=True, help="scratch folder for the runs")
    ap.add_argument("--report", required=True, help="markdown report (a .json beside it)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--only", default="", help="comma-separated checks to run (default: all)")
    ap.add_argument("--large-overrides", default="",
                    help="extra overrides for the large check, space-separated (a smaller model "
                         "for --device cpu)")
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    c = Check(args)
    on_gpu = args.device == "cuda"  # the kernels' tests and CUDA graphs need one
    names = (["kernels"] if on_gpu else []) + ["parity", "large"] + (["graphs"] if on_gpu else []) + [
        "memory", "seven_b", "layouts", "nccl", "checkpoint", "hf_import", "lora",
        "nf4"]  # the acceptance figures first: a time limit cuts the tail
    for n in (args.only.split(",") if args.only else names):
        t0 = time.time()
        c.attempt(n, getattr(c, n))
        print(f"  ({n}: {time.time() - t0:.0f} s)", flush=True)
        c.report()  # after each check: a run stopped by a time limit keeps what it measured
    return 0 if all(ok for _, ok, _ in c.results) else 1


if __name__ == "__main__":
    sys.exit(main())
