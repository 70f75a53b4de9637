"""The vLLM decode loop and the engine adapters it drives; pure Python, testable without vLLM.

    engine = StepEngine(llm.llm_engine)      # or BatchEngine(llm): the fallback without the step API
                                             # (lora_request=...: every request through one adapter)
    completions = decode(engine, prompts, make_params=..., max_new_tokens=64, max_model_len=512,
                         on_step=take_pending_push)   # -> one Completion per prompt

`decode` submits one request per sequence, steps the engine, and records each new token with its
log-prob and the weight version in force at the step that sampled it. Forced interruption runs
in two phases (a continuation request after the thinking budget). Per step it reads only the new
tokens of each output (`token_ids[seen:]`): vLLM's cumulative outputs hand back the whole,
growing list, and copying it every step made a generation quadratic in its length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from workbench.engine.model.sampling import Completion
from workbench.errors import UserError


def _tokens_prompt(ids: list[int]) -> dict:
    return {"prompt_token_ids": ids}  # the dict form of vllm.inputs.TokensPrompt (a TypedDict)


class StepEngine:
    """Adapter over the V1 `LLMEngine` step API: one `step()` = one scheduler iteration.
    `lora_request`: the LoRA adapter every request runs through (model.lora), else none."""

    def __init__(self, llm_engine: Any, make_prompt: Callable[[list[int]], Any] = _tokens_prompt, lora_request: Any = None):
        self.engine, self.make_prompt = llm_engine, make_prompt
        self.lora = {"lora_request": lora_request} if lora_request is not None else {}
        self._ids: dict[str, str] = {}  # id seen in outputs -> our id
        self._aliases: dict[str, list[str]] = {}

    def add(self, req_id: str, prompt_ids: list[int], params: Any) -> None:
        ret = self.engine.add_request(req_id, self.make_prompt(list(prompt_ids)), params, **self.lora)
        self._aliases[req_id] = [req_id]
        if isinstance(ret, str) and ret != req_id:  # newer vLLM may return an internal id (external + suffix)
            self._aliases[req_id].append(ret)
        for a in self._aliases[req_id]:
            self._ids[a] = req_id

    def has_unfinished(self) -> bool:
        return bool(self.engine.has_unfinished_requests())

    def _resolve(self, rid: str) -> Optional[str]:
        if rid in self._ids:
            return self._ids[rid]
        base = rid.rsplit("-", 1)[0]  # internal ids are "<external>-<random suffix>"
        return self._ids.get(base)

    def step(self) -> list[tuple[str, Any]]:
        out = []
        for o in self.engine.step():
            rid = self._resolve(o.request_id)
            if rid is None:
                continue
            out.append((rid, o))
            if o.finished:
                for a in self._aliases.pop(rid, []):
                    self._ids.pop(a, None)
        return out


class BatchEngine:
    """Fallback adapter: every `step()` runs all queued requests to completion with `llm.generate`."""

    def __init__(self, llm: Any, make_prompt: Callable[[list[int]], Any] = _tokens_prompt, lora_request: Any = None):
        self.llm, self.make_prompt = llm, make_prompt
        self.lora = {"lora_request": lora_request} if lora_request is not None else {}
        self._queue: list[tuple[str, list[int], Any]] = []

    def add(self, req_id: str, prompt_ids: list[int], params: Any) -> None:
        self._queue.append((req_id, list(prompt_ids), params))

    def has_unfinished(self) -> bool:
        return bool(self._queue)

    def step(self) -> list[tuple[str, Any]]:
        batch, self._queue = self._queue, []
        outs = self.llm.generate([self.make_prompt(p) for _, p, _ in batch], [sp for _, _, sp in batch], use_tqdm=False,
                                 **self.lora)
        return [(rid, o) for (rid, _, _), o in zip(batch, outs)]


def sampled_logprob(entry: Any, token: int) -> float:
    """The sampled token's log-prob from one position of vLLM's `logprobs` ({id: Logprob})."""
    if entry is None:
        raise RuntimeError("vLLM returned no log-probs for a position (was logprobs set in SamplingParams?)")
    value = entry.get(token) if hasattr(entry, "get") else entry[token]
    if value is None:
        raise RuntimeError(f"vLLM's log-probs at a position do not include the sampled token {token}")
    return float(getattr(value, "logprob", value))


@dataclass
class _Seq:
    prompt: list[int]
    completion: Completion
    budget: Optional[int]  # thinking budget (forced interruption); None: a single phase
    phase: str = "think"  # "think" (up to the budget) or "answer"
    seen: int = 0  # tokens of the current request already recorded


@dataclass
class PrefixCounter:
    """Prompt tokens served from vLLM's prefix cache against those asked for (an environment's next turns
    reuse their episode's earlier KV): the `gen/prefix_cache_hit` figure."""

    cached: int = 0
    prompt: int = 0

    def add(self, cached: Optional[int], prompt: int) -> None:
        """A finished request's figures (`cached` None: an older vLLM that does not say; not counted)."""
        if cached is not None:
            self.prompt += prompt
            self.cached += int(cached)

    def take(self) -> tuple[int, int]:
        """(cached, prompt) since the last take."""
        out = (self.cached, self.prompt)
        self.cached = self.prompt = 0
        return out


def decode(
    engine: Any, prompts: list[list[int]], *, make_params: Callable[[int, int, int], Any], max_new_tokens: int,
    max_model_len: int, budgets: Optional[list[int]] = None, interruption: Any = None,
    on_step: Optional[Callable[[], int]] = None, version: int = 0, id_prefix: str = "wb",
    limits: Optional[list[int]] = None, cached: Optional["PrefixCounter"] = None,
) -> list[Completion]:  # fmt: skip
    """Generate one completion per prompt through `engine` (StepEngine / BatchEngine interface).

    make_params(max_tokens, index, part) -> SamplingParams; part 0 = first request of sequence
    `index`, 1 = its continuation after the thinking budget. `on_step()` runs before every step
    (it may load new weights) and returns the version that the step's tokens are credited to.
    `limits`: each prompt's own most new tokens (an episode's turn). `cached`: adds up the prompt
    tokens the engine's prefix cache served (RequestOutput.num_cached_tokens) and those it was asked for.
    """
    seqs = [_Seq(list(p), Completion(prompt_tokens=list(p)), None if budgets is None else int(budgets[i])) for i, p in enumerate(prompts)]
    by_id: dict[str, int] = {}
    running: set[str] = set()

    def submit(i: int, prompt: list[int], max_tokens: int, part: int) -> None:
        rid = f"{id_prefix}{i}p{part}"
        by_id[rid] = i
        running.add(rid)
        seqs[i].seen = 0
        engine.add(rid, prompt, make_params(max_tokens, i, part))

    for i, s in enumerate(seqs):
        if len(s.prompt) >= max_model_len:
            raise UserError(f"a prompt has {len(s.prompt)} tokens; the vLLM engine's max_model_len is {max_model_len}")
        first = max_new_tokens if s.budget is None else min(s.budget, max_new_tokens)
        if limits is not None:
            first = min(first, int(limits[i]))
        submit(i, s.prompt, min(first, max_model_len - len(s.prompt)), 0)

    while engine.has_unfinished():
        if on_step is not None:
            version = on_step()
        for rid, out in engine.step():
            i = by_id[rid]
            s, c = seqs[i], seqs[i].completion
            res = out.outputs[0]
            new = res.token_ids[s.seen :]  # only this step's tokens: O(new), not O(length)
            for j, tok in enumerate(new, start=s.seen):
                c.tokens.append(int(tok))
                c.logprobs.append(sampled_logprob(res.logprobs[j] if res.logprobs is not None else None, int(tok)))
                c.versions.append(version)
                c.sampled.append(True)
            s.seen += len(new)
            if not out.finished:
                continue
            running.discard(rid)
            if cached is not None:
                cached.add(getattr(out, "num_cached_tokens", None), len(getattr(out, "prompt_token_ids", None) or ()))
            reason = res.finish_reason
            if reason == "stop":
                c.finished = True
            elif reason != "length":
                raise RuntimeError(f"vLLM request {rid} ended with finish_reason={reason!r}")
            elif s.budget is not None and s.phase == "think" and len(c.tokens) >= s.budget:
                s.phase = "answer"
                phrase = interruption.force_after(c.tokens, s.budget)
                room = max_new_tokens - len(c.tokens)
                if phrase:
                    n = len(phrase)
                    c.tokens += phrase
                    c.logprobs += [0.0] * n
                    c.versions += [version] * n
                    c.sampled += [False] * n
                    c.interrupted = True
                    room = min(interruption.max_answer_tokens, room - n)
                context = s.prompt + c.tokens
                room = min(room, max_model_len - len(context))
                if room > 0:
                    submit(i, context, room, 1)
    if running:
        raise RuntimeError(f"vLLM finished without a final output for {len(running)} request(s), e.g. {min(running)}")
    return [s.completion for s in seqs]
