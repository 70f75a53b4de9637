"""The memory plan of a .gguf model.path (engine/plan/sources.gguf_config): planned from the file's
header, never converted, with the figures the converted folder's config.json gives.

The converted config is what transformers' GGUF loader builds (`load_gguf_checkpoint`, which
`from_pretrained(..., gguf_file=...)` and so engine/model/gguf.py's conversion use), read here
without converting; the conversion itself is forbidden in these tests (it raises)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.config import load_run_config
from workbench.engine.model import gguf as gguf_module
from workbench.engine.plan.build import plan_for
from workbench.engine.plan.memory import GB, Cluster, ModelShape
from workbench.engine.plan.sources import gguf_config
from workbench.errors import UserError

REPO = Path(__file__).resolve().parents[3]
SMOLLM2_PARAMS = 134_515_008  # 30 layers, 576 wide, 49,152 tokens, tied embeddings (the converted model's count)


def smollm2() -> Path:
    """models/SmolLM2-135M-Instruct.Q4_1.gguf as `make setup` links it, else the wheel's own file."""
    linked = REPO / "models" / gguf_module.SMOLLM2_FILE
    return linked if linked.is_file() else gguf_module.smollm2_path()


@pytest.fixture
def no_conversion(monkeypatch):
    """Any conversion of a GGUF file fails the test."""

    def converted(*args, **kwargs):
        raise AssertionError("the plan converted the GGUF file")

    monkeypatch.setattr(gguf_module, "write_folder", converted)
    monkeypatch.setattr(gguf_module, "load_gguf", converted)


def write_gguf(path: Path, arch: str, *, untied: bool = True) -> Path:
    """A small GGUF file written with the gguf package: a 2-layer header and zero embeddings."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float32))  # GGUF's shape: [64, 100]
    if untied:
        w.add_tensor("output.weight", np.zeros((100, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_smollm2_gguf_is_planned_from_its_header_as_its_converted_config_and_nothing_is_converted(tmp_path, no_conversion):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path, cache = smollm2(), tmp_path / "cache"
    cfg = load_run_config(REPO / "configs" / "smollm2.yaml", [f"model.path={path}", f"model.cache_dir={cache}"])
    plan = plan_for(cfg, Cluster(0, 64 * GB, source="test"), prompt=64)
    assert plan.shape.params == SMOLLM2_PARAMS and plan.fits
    assert not cache.exists()  # no conversion cache was made
    converted = load_gguf_checkpoint(str(path))["config"]  # the converted folder's config.json, without converting
    assert ModelShape.from_config(converted) == plan.shape
    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(converted))
    same = plan_for(load_run_config(REPO / "configs" / "smollm2.yaml", [f"model.path={folder}"]),
                    Cluster(0, 64 * GB, source="test"), prompt=64)  # fmt: skip
    assert [(r.name, r.terms, r.need) for r in same.roles] == [(r.name, r.terms, r.need) for r in plan.roles]


@pytest.mark.slow
def test_workbench_plan_on_the_smollm2_config_tokenizes_its_prompts_from_the_file_and_converts_nothing(tmp_path, capsys,
                                                                                                      no_conversion):  # fmt: skip
    cache = tmp_path / "cache"
    rc = main(["plan", "--config", str(REPO / "configs" / "smollm2.yaml"), "--model", str(smollm2()),
               "--set", f"model.cache_dir={cache}"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and out.rstrip().endswith("verdict: fits"), out
    assert "llama 134.52M parameters (V=49,152 H=576 L=30 heads=9/3 kv, tied head)" in out
    assert "(the task's longest prompt)" in out and "in bytes" not in out  # encoded by the GGUF's own tokenizer
    assert "evaluator on host" in out and not cache.exists()


def test_another_architecture_and_an_untied_head_map_as_transformers_maps_them(tmp_path):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = write_gguf(tmp_path / "small-qwen2.gguf", "qwen2")
    fields = gguf_config(path)
    theirs = load_gguf_checkpoint(str(path))["config"]
    assert {k: fields[k] for k in theirs} == theirs  # every field transformers reads, read the same
    assert fields["vocab_size"] == 100 and fields["tie_word_embeddings"] is False  # from the tensors, no vocab key
    shape = ModelShape.from_config(fields)
    assert (shape.layers, shape.hidden, shape.kv_heads, shape.vocab, shape.tied) == (2, 64, 2, 100, False)
    assert gguf_config(write_gguf(tmp_path / "tied.gguf", "llama", untied=False))["tie_word_embeddings"] is True


def test_a_gguf_transformers_cannot_read_is_one_line_before_anything_is_written(tmp_path):
    cfg = load_run_config(None, [f"model.path={write_gguf(tmp_path / 'odd.gguf', 'nonesuch')}",
                                 f"model.cache_dir={tmp_path / 'cache'}"])  # fmt: skip
    with pytest.raises(UserError) as e:
        plan_for(cfg, Cluster(0, 64 * GB), prompt=64)
    line = str(e.value)
    assert "\n" not in line and "transformers cannot load odd.gguf from GGUF: architecture 'nonesuch'" in line
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"half a header")  # a download that stopped early
    with pytest.raises(UserError, match="cannot read the GGUF header of cut.gguf"):
        plan_for(load_run_config(None, [f"model.path={cut}"]), Cluster(0, 64 * GB), prompt=64)
    assert not (tmp_path / "cache").exists()
