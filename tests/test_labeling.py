"""pipeline.labeling: BIO tags over wordpieces, chunk F1, CLUENER/MSRA readers (tiny data made here)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
from tokenizers import BertWordPieceTokenizer

import pipeline  # noqa: F401  (import order)
from pipeline import wordpiece
from pipeline.errors import DataError
from pipeline.labeling import bio, metric
from pipeline.labeling.bio import Entity, decode_tags, encode_token, pad_batch, tag_names, token_tags
from pipeline.labeling.metric import chunk_f1
from pipeline.labeling.readers import entity_types, read_cluener, read_msra_bio

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHARS = list("我在北京玩游戏上海人民的了去看华为公司")
# Latin words come out as several wordpieces (c ##s ##o ##l); "abcd" is one whole-word token.
PIECES = ["c", "##s", "##o", "##l", "d", "##o", "##t", "##a", "abcd", "x"]
TYPES = ["game", "address", "company"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(dict.fromkeys(SPECIALS + CHARS + PIECES)) + "\n", encoding="utf-8")
    return wordpiece.build(vocab)  # what the pipeline and the served bundle use


@pytest.fixture(scope="module")
def tags() -> list[str]:
    return tag_names(TYPES)


def entity(text: str, entity_type: str, surface: str, occurrence: int = 0) -> Entity:
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(surface, start + 1)
    return Entity(entity_type, start, start + len(surface), surface)


def round_trip(tok, text: str, entities: list[Entity], tags: list[str], max_seq_len: int = 64) -> list[Entity]:
    encoded = encode_token(tok, text, max_seq_len)
    tag_ids = token_tags(encoded.offsets, entities, {name: i for i, name in enumerate(tags)})
    return decode_tags(tag_ids, encoded.offsets, text, tags)


# ------------------------------------------------------------------------------------------------ bio


def test_tag_names_order():
    assert tag_names(["b_type", "a_type"]) == ["O", "B-b_type", "I-b_type", "B-a_type", "I-a_type"]
    assert tag_names([]) == ["O"]
    with pytest.raises(ValueError, match="duplicate"):
        tag_names(["x", "x"])


def test_encode_adds_special_tokens_with_minus_one_offsets(tok):
    text = "我玩CSOL"
    encoded = encode_token(tok, text, 64)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    assert encoded.input_ids.dtype == np.int64 and encoded.offsets.dtype == np.int64
    assert encoded.input_ids.tolist() == [cls_id, *tok.encode(text, add_special_tokens=False).ids, sep_id]
    assert encoded.offsets.tolist() == [[-1, -1], [0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 6], [-1, -1]]
    # wordpieces of the Latin word: c ##s ##o ##l
    assert [tok.id_to_token(i) for i in encoded.input_ids[3:7]] == ["c", "##s", "##o", "##l"]


def test_encode_truncates_to_max_seq_len(tok):
    encoded = encode_token(tok, "我在北京玩游戏", 5)
    assert len(encoded.input_ids) == 5 and encoded.truncated
    assert not encode_token(tok, "我在北京玩游戏", 9).truncated and encode_token(tok, "我在北京玩游戏", 8).truncated
    assert encoded.offsets.tolist() == [[-1, -1], [0, 1], [1, 2], [2, 3], [-1, -1]]
    empty = encode_token(tok, "", 8)
    assert empty.offsets.tolist() == [[-1, -1], [-1, -1]]
    with pytest.raises(ValueError, match="max_seq_len"):
        encode_token(tok, "我", 1)


def test_encode_refuses_tokenizer_with_truncation(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + CHARS) + "\n", encoding="utf-8")
    truncating = BertWordPieceTokenizer(str(vocab), lowercase=True)
    truncating.enable_truncation(4)
    with pytest.raises(ValueError, match="truncation"):
        encode_token(truncating, "我在北京", 64)


def test_round_trip_chinese_latin_and_spaces(tok, tags):
    text = "我在北京玩CSOL 和 dota去上海华为公司"
    gold = [
        entity(text, "address", "北京"),
        entity(text, "game", "CSOL"),
        entity(text, "game", "dota"),
        entity(text, "address", "上海"),
        entity(text, "company", "华为公司"),
    ]
    assert round_trip(tok, text, gold, tags) == gold


def test_token_tags_values(tok, tags):
    text = "玩CSOL游戏"
    encoded = encode_token(tok, text, 64)
    index = {name: i for i, name in enumerate(tags)}
    tag_ids = token_tags(encoded.offsets, [entity(text, "game", "CSOL")], index)
    assert [tags[i] if i >= 0 else i for i in tag_ids] == [-100, "O", "B-game", "I-game", "I-game", "I-game", "O", "O", -100]


def test_truncation_cuts_entities(tok, tags):
    text = "我在北京玩游戏上海"
    gold = [entity(text, "address", "北京"), entity(text, "game", "游戏"), entity(text, "address", "上海")]
    # max_seq_len 8 keeps 6 chars: "北京" whole, "游戏" loses its second char, "上海" vanishes.
    assert round_trip(tok, text, gold, tags, max_seq_len=8) == [gold[0], Entity("game", 5, 6, "游")]


def test_entity_start_inside_a_token_snaps_to_the_token(tok, tags):
    text = "我abcd在"  # "abcd" is a single token
    snapped = round_trip(tok, text, [Entity("company", 2, 5, "bcd")], tags)
    assert snapped == [Entity("company", 1, 5, "abcd")]
    # whitespace before the first token: the first covered token still gets the B tag
    text = "我 c在"
    assert round_trip(tok, text, [Entity("game", 1, 3, " c")], tags) == [Entity("game", 2, 3, "c")]


def test_adjacent_entities_sharing_nothing_stay_apart(tok, tags):
    text = "北京上海"
    gold = [entity(text, "address", "北京"), entity(text, "address", "上海")]
    assert round_trip(tok, text, gold, tags) == gold


def _offsets(n: int, specials: tuple[int, ...] = ()) -> np.ndarray:
    offsets = np.array([[i, i + 1] for i in range(n)], dtype=np.int64)
    for position in specials:
        offsets[position] = (-1, -1)
    return offsets


def test_decode_lenient_cases(tags):
    text = "abcdefgh"
    ix = {name: i for i, name in enumerate(tags)}
    o, bg, ig, ia = ix["O"], ix["B-game"], ix["I-game"], ix["I-address"]
    # I after O starts an entity; a type switch inside I starts a new entity; an entity at the end is closed.
    tag_ids = np.array([o, ig, ig, ia, o, bg, ig, ig])
    assert decode_tags(tag_ids, _offsets(8), text, tags) == [
        Entity("game", 1, 3, "bc"),
        Entity("address", 3, 4, "d"),
        Entity("game", 5, 8, "fgh"),
    ]
    # B after B starts a new one
    assert decode_tags(np.array([bg, bg]), _offsets(2), text, tags) == [Entity("game", 0, 1, "a"), Entity("game", 1, 2, "b")]
    # special tokens (-1, -1) close an open entity and are skipped, whatever tag they got
    tag_ids = np.array([ig, bg, ig, ig, ig])
    assert decode_tags(tag_ids, _offsets(5, specials=(0, 3)), text, tags) == [
        Entity("game", 1, 3, "bc"),
        Entity("game", 4, 5, "e"),
    ]
    # gold rows carry -100 on special tokens
    assert decode_tags(np.array([-100, bg, -100]), _offsets(3, specials=(0, 2)), text, tags) == [Entity("game", 1, 2, "b")]
    with pytest.raises(ValueError, match="out of range"):
        decode_tags(np.array([len(tags)]), _offsets(1), text, tags)


def test_pad_batch_and_padded_decode(tok, tags):
    texts = ["我玩CSOL", "北京"]
    items = [encode_token(tok, text, 64) for text in texts]
    pad_id = tok.token_to_id("[PAD]")
    input_ids, token_type_ids, offsets = pad_batch(items, pad_id)
    assert input_ids.shape == (2, 8) and token_type_ids.shape == (2, 8) and offsets.shape == (2, 8, 2)
    assert input_ids.dtype == token_type_ids.dtype == offsets.dtype == np.int64
    assert input_ids[1].tolist() == [*items[1].input_ids.tolist(), pad_id, pad_id, pad_id, pad_id]
    assert not token_type_ids.any()
    assert (offsets[1, 4:] == -1).all() and offsets[0].tolist() == items[0].offsets.tolist()
    # padding decodes like a special token: a padded row gives the same entities as the unpadded one
    index = {name: i for i, name in enumerate(tags)}
    gold = [Entity("address", 0, 2, "北京")]
    tag_ids = token_tags(items[1].offsets, gold, index)
    padded = np.concatenate([tag_ids, np.full(4, index["I-address"])])
    assert decode_tags(padded, offsets[1], texts[1], tags) == gold
    empty = pad_batch([], pad_id)
    assert [a.shape for a in empty] == [(0, 0), (0, 0), (0, 0, 2)]


@pytest.mark.parametrize("module", [bio, metric])
def test_pure_modules_import_only_stdlib_and_numpy(module):
    # They are copied verbatim into Triton model folders: no pipeline./paddle imports allowed.
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert roots <= {"__future__", "collections", "dataclasses", "typing", "numpy"}


# ----------------------------------------------------------------------------------------------- metric


def test_chunk_f1_hand_computed():
    gold = [
        [Entity("PER", 0, 2, "ab"), Entity("LOC", 3, 5, "de")],
        [Entity("PER", 1, 3, "xy")],
        [],
    ]
    pred = [
        [Entity("PER", 0, 2, "ab"), Entity("LOC", 3, 4, "d")],  # one right, one wrong boundary
        [Entity("LOC", 1, 3, "xy")],  # right span, wrong type
        [Entity("PER", 0, 1, "q")],  # spurious
    ]
    scores = chunk_f1(gold, pred)
    assert (scores.gold, scores.predicted, scores.correct) == (3, 4, 1)
    assert scores.precision == pytest.approx(1 / 4)
    assert scores.recall == pytest.approx(1 / 3)
    assert scores.f1 == pytest.approx(2 * (1 / 4) * (1 / 3) / (1 / 4 + 1 / 3))
    assert scores.per_type["PER"] == pytest.approx({"precision": 1 / 2, "recall": 1 / 2, "f1": 1 / 2, "gold": 2})
    assert scores.per_type["LOC"] == pytest.approx({"precision": 0.0, "recall": 0.0, "f1": 0.0, "gold": 1})


def test_chunk_f1_edge_cases():
    perfect = chunk_f1([[Entity("A", 0, 1, "x")]], [[Entity("A", 0, 1, "other text ignored")]])
    assert (perfect.precision, perfect.recall, perfect.f1) == (1.0, 1.0, 1.0)
    nothing = chunk_f1([[]], [[]])
    assert (nothing.f1, nothing.gold, nothing.per_type) == (0.0, 0, {})
    with pytest.raises(ValueError, match="gold examples"):
        chunk_f1([[]], [])


# ---------------------------------------------------------------------------------------------- readers


def write_lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows), "utf-8")
    return path


def test_read_cluener_good_file(tmp_path):
    path = write_lines(
        tmp_path / "train.json",
        [
            {"text": "浙商银行叶老桂说", "label": {"name": {"叶老桂": [[4, 6]]}, "company": {"浙商银行": [[0, 3]]}}},
            "",
            {"text": "北京和北京", "label": {"address": {"北京": [[0, 1], [3, 4]]}}},
            {"text": "没有实体", "label": {}},
        ],
    )
    split = read_cluener(path)
    assert split.source == str(path) and split.skipped == {"overlapping_entity": 0}
    assert [ex.text for ex in split.examples] == ["浙商银行叶老桂说", "北京和北京", "没有实体"]
    # inclusive ends become exclusive; entities sorted by start
    assert split.examples[0].entities == (Entity("company", 0, 4, "浙商银行"), Entity("name", 4, 7, "叶老桂"))
    assert split.examples[1].entities == (Entity("address", 0, 2, "北京"), Entity("address", 3, 5, "北京"))
    assert split.examples[2].entities == ()
    assert entity_types([split]) == ["address", "company", "name"]


def test_read_cluener_overlap_kept_first_and_counted(tmp_path):
    text = "《招商银行投资》文章"
    path = write_lines(
        tmp_path / "train.json",
        [{"text": text, "label": {"company": {"招商银行": [[1, 4]]}, "book": {"《招商银行投资》": [[0, 7]]}}}],
    )
    split = read_cluener(path)
    assert split.examples[0].entities == (Entity("book", 0, 8, text[:8]),)
    assert split.skipped == {"overlapping_entity": 1}


def test_read_cluener_unlabeled_rows(tmp_path):
    path = write_lines(tmp_path / "test.json", [{"id": 0, "text": "北京"}])
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:1: field 'label' missing"):
        read_cluener(path)
    split = read_cluener(path, require_labels=False)
    assert split.examples[0].text == "北京" and split.examples[0].entities == ()


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ('{"text": "北京", "label": ', "malformed JSON"),
        ('["北京"]', "expected a JSON object"),
        ({"label": {}}, "field 'text' missing"),
        ({"text": "北京", "label": {"address": {"北京": [[0, 2]]}}}, "outside the text"),
        ({"text": "北京", "label": {"address": {"北京": [[-1, 1]]}}}, "outside the text"),
        ({"text": "北京上海", "label": {"address": {"北京": [[1, 2]]}}}, "not the entity '北京'"),
        ({"text": "北京", "label": {"address": {"北京": [[0]]}}}, "is not \\[start, end\\]"),
        ({"text": "北京", "label": {"address": ["北京"]}}, "must map entity text"),
        ({"text": "北京", "label": "address"}, "field 'label' must be an object"),
    ],
)
def test_read_cluener_bad_rows_name_path_and_line(tmp_path, bad_row, message):
    good = {"text": "上海", "label": {"address": {"上海": [[0, 1]]}}}
    path = write_lines(tmp_path / "dev.json", [good, good, bad_row])
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:3: .*{message}"):
        read_cluener(path)


def test_read_cluener_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_cluener(tmp_path / "nope.json")


MSRA_CONLL = """\
我 O
在 O
北 B-LOC
京 I-LOC

华 I-ORG
为 I-ORG
上 B-LOC
海 B-LOC


王\tB-PER
五\tI-PER"""


def test_read_msra_conll(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(MSRA_CONLL, encoding="utf-8")
    split = read_msra_bio(path)
    assert [ex.text for ex in split.examples] == ["我在北京", "华为上海", "王五"]
    assert split.examples[0].entities == (Entity("LOC", 2, 4, "北京"),)
    # I- without B- starts an entity; B after B starts another
    assert split.examples[1].entities == (Entity("ORG", 0, 2, "华为"), Entity("LOC", 2, 3, "上"), Entity("LOC", 3, 4, "海"))
    assert split.examples[2].entities == (Entity("PER", 0, 2, "王五"),)
    assert entity_types([split]) == ["LOC", "ORG", "PER"]


@pytest.mark.parametrize(
    "bad_line, message",
    [("京 X-FOO", "malformed tag 'X-FOO'"), ("京", "expected 'char TAG', got 1"), ("京 B-", "malformed tag 'B-'"),
     ("京 B-LOC extra", "got 3 field")],
)
def test_read_msra_bad_lines_name_path_and_line(tmp_path, bad_line, message):
    path = tmp_path / "train.txt"
    path.write_text(f"我 O\n\n在 O\n{bad_line}\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:4: .*{message}"):
        read_msra_bio(path)


def test_read_msra_paddlenlp_format(tmp_path):
    path = tmp_path / "train.tsv"
    rows = ["text_a\tlabel", "我\x02在\x02北\x02京\tO\x02O\x02B-LOC\x02I-LOC", "王\tB-PER", ""]
    path.write_text("\n".join(rows), encoding="utf-8")
    split = read_msra_bio(path)
    assert [ex.text for ex in split.examples] == ["我在北京", "王"]  # a one-char sentence stays its own sentence
    assert split.examples[0].entities == (Entity("LOC", 2, 4, "北京"),)
    assert split.examples[1].entities == (Entity("PER", 0, 1, "王"),)

    path.write_text("我\x02在\tO\x02O\n我\x02在\tO\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: 2 chars but 1 tags"):
        read_msra_bio(path)
    path.write_text("我\x02在\tO\x02Z-LOC\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:1: malformed tag 'Z-LOC'"):
        read_msra_bio(path)
