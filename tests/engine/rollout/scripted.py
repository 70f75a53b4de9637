"""A scripted stand-in for vLLM's `LLMEngine` step API (add_request / step / has_unfinished_requests).

For the failure cases the real engine cannot produce on demand (dropped outputs, aborts, internal
request ids) and for counting what the decode loop reads. The real engine is tested in
test_backend_engine.py.
"""

from __future__ import annotations

from types import SimpleNamespace

EOS = 1


class ScriptedEngine:
    """Mimics vLLM's LLMEngine surface: add_request / step / has_unfinished_requests.

    `respond(context_ids) -> planned tokens`; one token per request per step, cumulative outputs,
    log-prob entries {token: Logprob-like} holding the sampled token and a decoy.
    """

    def __init__(self, respond, suffix: str = "", on_step=None, drop_finals: bool = False, reason=None, seq=list):
        self.respond, self.suffix, self.on_step, self.seq = respond, suffix, on_step, seq
        self.drop_finals, self.reason = drop_finals, reason
        self.reqs: dict[str, dict] = {}
        self.added: list[tuple[str, list[int], object]] = []
        self.steps = 0

    def add_request(self, rid, prompt, params):
        ids = list(prompt["prompt_token_ids"])
        self.added.append((rid, ids, params))
        internal = rid + self.suffix
        self.reqs[internal] = {"plan": list(self.respond(ids)), "out": [], "lps": [], "max": params.max_tokens}
        return internal if self.suffix else None

    def has_unfinished_requests(self):
        return bool(self.reqs)

    def step(self):
        self.steps += 1
        if self.on_step:
            self.on_step(self.steps)
        outs = []
        for rid, r in list(self.reqs.items()):
            pos = len(r["out"])
            tok = r["plan"][pos] if pos < len(r["plan"]) else 7
            r["out"].append(tok)
            r["lps"].append({tok: SimpleNamespace(logprob=-0.5 - pos), 99: SimpleNamespace(logprob=-9.0)})
            reason = "stop" if tok == EOS else ("length" if len(r["out"]) >= r["max"] else None)
            reason = self.reason if (reason and self.reason) else reason
            if reason:
                del self.reqs[rid]
                if self.drop_finals:
                    continue
            res = SimpleNamespace(token_ids=self.seq(r["out"]), logprobs=self.seq(r["lps"]), finish_reason=reason)
            outs.append(SimpleNamespace(request_id=rid, finished=reason is not None, outputs=[res]))
        return outs


class CountingList(list):
    """A list that counts the elements read from it (iteration, indexing, slicing): what the
    decode loop copies out of vLLM's cumulative outputs."""

    reads = 0

    def __iter__(self):
        CountingList.reads += len(self)
        return super().__iter__()

    def __getitem__(self, key):
        got = super().__getitem__(key)
        CountingList.reads += len(got) if isinstance(key, slice) else 1
        return got


def params(max_tokens, i, part):
    return SimpleNamespace(max_tokens=max_tokens, index=i, part=part)
