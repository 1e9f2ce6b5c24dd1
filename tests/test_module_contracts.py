"""Direct tests of modules no other test file named (issue 40): the run cache, the INT8 search rows, the shipped
forms' sources, and both sides' kind tables.  Each asserts what the module's docstring promises."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import pipeline  # noqa: F401  (numpy before paddle)
from pipeline.contract import TaskKind

ROOT = Path(__file__).resolve().parent.parent


# -- pipeline/run_cache.py ------------------------------------------------------------------------------------------
def test_run_cache_moves_a_former_cache_once_counts_and_clears(tmp_path):
    from pipeline.run_cache import RunCache

    former = tmp_path / "int8_candidates"  # where runs made before 2026-11-25 kept INT8 candidates
    (former / "cand-a").mkdir(parents=True)
    (former / "cand-a" / "model.onnx").write_bytes(b"x" * 1000)
    (former / "cand-b.json").write_text("{}")
    cache = RunCache(tmp_path)
    assert cache.int8 == tmp_path / "cache" / "int8" and not former.exists()
    (tmp_path / "int8_candidates").mkdir()  # a new former dir after the move is never merged over the cache
    assert cache.int8.is_dir() and (tmp_path / "int8_candidates").is_dir()
    (summary,) = cache.summary()  # dynabert: no directory, no line
    assert (summary.name, summary.entries, summary.bytes) == ("int8", 2, 1002)
    assert "2 entries" in summary.line()
    assert cache.clear() and not (tmp_path / "cache").exists() and not cache.clear()


def test_run_cache_never_follows_links(tmp_path):
    from pipeline.run_cache import RunCache

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "keep").mkdir(parents=True)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "dynabert_cache").symlink_to(elsewhere)  # a link at the former place is not moved in
    assert not RunCache(runs).dynabert.exists()
    (runs / "cache").symlink_to(elsewhere)  # a linked cache is not removed (nor what it points to)
    assert RunCache(runs).clear() is False and (elsewhere / "keep").is_dir()


# -- pipeline/quantization/select.py ----------------------------------------------------------------------------------
def _tiny_cfg(**q):
    from pipeline.config import load_task_config

    return load_task_config("tnews", {"quantization.calibration_sentences": 4, "quantization.int8_search_sentences": 3,
                                      "quantization.calibration_batch_size": 2, **{f"quantization.{k}": v for k, v in q.items()}})


def test_search_rows_calibrate_on_the_first_rows_and_score_on_the_last(tmp_path):
    from pipeline.data import Example
    from pipeline.kinds import get_kind
    from pipeline.quantization.select import search_rows
    from pipeline.tokenizer import Tokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"一二三四五六七八九十"]) + "\n", encoding="utf-8")
    cfg = _tiny_cfg()
    train = [Example(text_a="一二三四五六七八九十"[: 1 + i % 10], text_b=None, label=i % 2) for i in range(10)]
    rows = search_rows(cfg, Tokenizer(vocab, max_seq_len=16), train, get_kind(cfg))
    assert [len(f["input_ids"]) for f in rows.feeds] == [2, 2]  # 4 calibration rows in batches of 2, in order
    assert rows.feeds[0]["input_ids"][0].tolist()[:3] == [2, 5, 3]  # [CLS] 一 [SEP]: the first training row
    assert [f.target for f in rows.held.features] == [1, 0, 1]  # the last 3 rows (7, 8, 9), never the first 4
    other = search_rows(cfg, Tokenizer(vocab, max_seq_len=16), train[:-1] + [Example(text_a="十", text_b=None, label=1)], get_kind(cfg))
    assert other.content_key() != rows.content_key()  # a changed held-out row changes every candidate's cache key


def test_openvino_forms_only_when_openvino_is_a_compress_engine():
    """An engine's own form (OpenVINO's IR) is made, and keys compress, only where it is one of compress.engines."""
    from pipeline.backends.registry import own_form_engines
    from pipeline.config import load_task_config
    from pipeline.quantization.select import search_params
    from pipeline.stages.compress import params

    assert [e.name for e in own_form_engines(_tiny_cfg())] == ["openvino"]
    assert params(_tiny_cfg())["openvino"]["alphas"] == _tiny_cfg().quantization.openvino_smooth_alphas
    for without in ({"compress.engines": ["onnxruntime"]}, {"compress.candidate_format": "paddle"}):
        cfg = load_task_config("tnews", without)
        assert own_form_engines(cfg) == [] and params(cfg)["openvino"] is None
    assert search_params(_tiny_cfg())["budget_points"] == _tiny_cfg().gates.max_accuracy_drop


# -- pipeline/compress/shipped.py -----------------------------------------------------------------------------------
def test_shipped_forms_come_from_compress_own_onnx_when_it_has_them(tmp_path):
    """The candidates' own FP32 ONNX (unpruned and the selected width's) are the sources: nothing converted again,
    also when the width's FP32 candidate was screened out (the INT8 candidate names the ONNX it was made from)."""
    from pipeline.compress.candidates import Candidate
    from pipeline.compress.shipped import fp32_sources

    base, width, depth = tmp_path / "fp32.onnx", tmp_path / "w0.667.onnx", tmp_path / "d0.5.onnx"
    cands = [Candidate("fp32", 1.0, "none", False, None, None, model_path=base, source_onnx=base),
             Candidate("w0.6667", 2 / 3, "none", False, None, None, model_path=width, source_onnx=width),
             Candidate("w0.6667-int8", 2 / 3, "ort", False, None, None, model_path=tmp_path / "int8.onnx", source_onnx=width),
             Candidate("d0.5-int8", 1.0, "ort", False, None, None, model_path=tmp_path / "d.onnx", source_onnx=depth,
                       depth_mult=0.5)]

    def fail(message):
        raise AssertionError(f"converted again: {message}")

    got = fp32_sources(cands, cands[2], tmp_path, tmp_path / "work", 13, fail)
    assert (got.fp32_onnx, got.source_onnx, got.pruned) == (base, width, True)
    got = fp32_sources(cands, cands[0], tmp_path, tmp_path / "work", 13, fail)
    assert (got.fp32_onnx, got.source_onnx, got.pruned) == (base, base, False)
    got = fp32_sources([cands[0], cands[2]], cands[2], tmp_path, tmp_path / "work", 13, fail)  # w0.667 not built
    assert (got.fp32_onnx, got.source_onnx, got.pruned) == (base, width, True)
    got = fp32_sources(cands, cands[3], tmp_path, tmp_path / "work", 13, fail)  # every head, fewer layers: pruned
    assert (got.fp32_onnx, got.source_onnx, got.pruned) == (base, depth, True)


def test_shipped_searches_round_trip_in_the_file_layout_meta_json_keeps(tmp_path):
    """int8_search.json typed (issue 40: export read it by string keys): ONNX Runtime's search at the top level,
    qdq and openvino beside it; a form nothing searched (per-batch INT8) names its recipe."""
    from pipeline.compress.shipped import FormSearch, ShippedSearches

    searched = {"chosen": {"name": "static-sq0.85", "drop_points": 0.4}, "within_budget": True, "candidates": []}
    s = ShippedSearches({"cores": 2}, FormSearch(searched), FormSearch({"chosen": {"name": "static-sq0.85", "drop_points": 0.5}}),
                        {"openvino": FormSearch({"chosen": {"name": "openvino-sq0.5", "drop_points": 0.1}})})
    s.write(tmp_path / "int8_search.json")
    on_disk = json.loads((tmp_path / "int8_search.json").read_text())
    assert on_disk["chosen"]["name"] == "static-sq0.85" and on_disk["qdq"]["chosen"]["drop_points"] == 0.5
    back = ShippedSearches.read(tmp_path / "int8_search.json")
    assert on_disk["openvino"]["chosen"]["name"] == "openvino-sq0.5"  # meta.json's section, by engine name
    assert back == s and back.onnxruntime.searched and back.own["openvino"].recipe == "openvino-sq0.5"
    assert (back.onnxruntime.heldout_drop_points, back.onnxruntime.within_budget) == (0.4, True)
    dynamic = ShippedSearches({}, FormSearch({"recipe": "dynamic-per-batch", "batch_independent": False}),
                              FormSearch({"recipe": "static-minmax"}))
    dynamic.write(tmp_path / "d.json")
    back = ShippedSearches.read(tmp_path / "d.json")
    assert back.own == {} and not back.onnxruntime.searched and back.onnxruntime.recipe == "dynamic-per-batch"


# -- serving/bundle/kinds/ and serving/tools/kinds/ -----------------------------------------------------------------
BUNDLE_IMPORTS_ALLOWED = {"numpy", "tokenizers", "json", "re", "unicodedata", "math", "dataclasses", "typing",
                          "__future__", "collections", "functools", "itertools", "bisect"}


@pytest.mark.parametrize("kind", list(TaskKind))
def test_each_kind_copies_only_modules_that_run_inside_triton(kind):
    """The pure modules a bundle carries exist and import only the standard library, numpy and tokenizers (what
    Triton's python backend has), never pipeline or serving."""
    from serving.bundle.kinds import bundle_kind

    k = bundle_kind(kind.value)
    assert k.kind is kind
    for rel in (*k.files.tokenizer_pure, *k.files.postprocess_pure):
        path = ROOT / "pipeline" / rel
        assert path.is_file(), rel
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
        assert imported <= BUNDLE_IMPORTS_ALLOWED | set(sys.stdlib_module_names), (rel, imported - BUNDLE_IMPORTS_ALLOWED)
        assert not imported & {"pipeline", "serving", "paddle", "paddlenlp", "onnxruntime", "openvino"}, rel


def test_both_kind_tables_cover_every_kind_and_the_client_command_line_takes_each_command():
    from serving.bundle.kinds import kinds as bundle_kinds
    from serving.tools import client_cli
    from serving.tools.kinds import commands, kind_of_outputs, kinds, tool_kind

    assert set(bundle_kinds()) == set(kinds()) == {k.value for k in TaskKind}
    for name, k in kinds().items():
        assert tool_kind(name) is k and kind_of_outputs([k.output]) is k
        assert commands()[k.command] == name
        with pytest.raises(SystemExit) as exc:  # the command exists: --help exits 0
            client_cli.main([k.command, "--help"])
        assert exc.value.code == 0
    assert kind_of_outputs(["label", "probs"]).name == TaskKind.CLASSIFICATION.value  # FastDeploy's outputs


@pytest.mark.parametrize("name, section, keys", [
    ("reading_comprehension", "reading", ("doc_stride", "max_query_len", "max_answer_len")),
    ("uie", "uie", ("doc_stride", "max_prompt_len", "max_span_len"))])
def test_a_windowed_kind_names_what_is_wrong_with_its_meta_section(name, section, keys):
    """The served windowing reads meta.json's section of its kind: each integer positive, the first segment leaving
    room for context, UIE's threshold a probability; the other kinds have no section to check."""
    from serving.bundle.kinds import bundle_kind

    kind = bundle_kind(name)
    good = {"max_seq_len": 64, section: {**dict.fromkeys(keys, 8), "position_prob": 0.5}}
    assert kind.meta_problem(good) is None
    assert kind.meta_problem({"max_seq_len": 64}) == f"field {section!r} ({', '.join(keys)}) missing"
    for key, bad in ((keys[0], 0), (keys[2], True), (keys[2], "8")):
        assert kind.meta_problem({**good, section: {**good[section], key: bad}}) == \
            f"{section}.{key} must be a positive integer, got {bad!r}"
    assert kind.meta_problem({**good, section: {**good[section], keys[1]: 61}}) == \
        f"{section}.{keys[1]} 61 leaves no room for context in max_seq_len 64"
    prob = kind.meta_problem({**good, section: {**good[section], "position_prob": 1.0}})
    assert prob == ("uie.position_prob must be in (0, 1), got 1.0" if name == "uie" else None)
    assert bundle_kind("classification").meta_problem({"max_seq_len": 64}) is None


def test_package_api_fastdeploy_is_offered_for_the_kinds_that_name_an_example():
    """Each kind names its own FastDeploy example; the refusal for one without lists those that have one."""
    from pipeline.errors import ConfigError
    from serving.bundle.config import PackageConfig
    from serving.bundle.kinds import bundle_kind, check_api, kinds

    offered = {n: k.fastdeploy.model for n, k in kinds().items() if k.fastdeploy is not None}
    assert offered == {"classification": "ernie_seqcls", "token_classification": "ernie_tokencls", "uie": "uie"}
    fastdeploy = PackageConfig(api="fastdeploy")
    assert [bundle_kind(n).served_name("news", fastdeploy) for n in offered] == list(offered.values())
    assert bundle_kind("classification").served_name("news", PackageConfig()) == "news"
    with pytest.raises(ConfigError, match=r"^package.api: fastdeploy has serving examples for classification "
                       r"\(ernie_seqcls\), token_classification \(ernie_tokencls\) and uie \(uie\), not reading_comprehension"):
        check_api("reading_comprehension", fastdeploy)
    check_api("reading_comprehension", PackageConfig())  # our API serves every kind
