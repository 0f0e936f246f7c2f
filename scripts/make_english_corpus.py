#!/usr/bin/python3
"""Assembles pgq's English corpus from Debian packages, as documents:

    scripts/make_english_corpus.py OUT_DIR

writes OUT_DIR/train.txt and OUT_DIR/val.txt (UTF-8, documents separated by one blank
line, no blank line inside a document) and OUT_DIR/SOURCES.txt (documents and bytes per
source and split, package versions). docs/CORPUS.md describes the sources, their
licenses and the cleaning. Standard library only.

Sources, in this order:
  kjv       the King James Bible (`bible` of bible-kjv), one document per chapter: the
            chapter's title line, then one verse per line without its verse number (the
            numbers are references, not prose: a model would spend capacity on counting).
  gcide     the GNU Collaborative International Dictionary of English (dict-gcide), one
            document per entry of its dictd index; the source lines ("[1913 Webster]",
            "[WordNet 1.5]", "[PJC]", ...) and dictd's {link} braces are dropped, lines
            are stripped of their indentation and runs of spaces are collapsed.
  wordnet   WordNet 3.0 synsets (wordnet-base), one document "word, synonym: gloss" each.
  fortunes  fortune cookies (fortunes, fortunes-min), one document per fortune; the
            ascii-art file is left out (pictures, not English), overstrikes removed.

The split is by document: a document goes to validation when the SHA-256 of its stable id
("kjv/Genesis 1", "gcide/Apple/2", "wordnet/noun/00001740", "fortunes/art/17") falls in
the lowest 5% (VAL_PER_MILLE), so it does not move when other documents change. The
output is the same bytes on every run with the same packages. Each file is written to a
temporary file and renamed; SOURCES.txt is removed first and written last, so its
presence means the corpus is complete (scripts/setup.sh relies on it).
"""

import codecs
import gzip
import hashlib
import os
import re
import subprocess
import sys

VAL_PER_MILLE = 50  # 5% of the documents go to validation
BIBLE_RANGE = "Gen1:1-Rev22:21"
GCIDE = "/usr/share/dictd/gcide.dict.dz"
GCIDE_INDEX = "/usr/share/dictd/gcide.index"
WORDNET = "/usr/share/wordnet"
FORTUNES = "/usr/share/games/fortunes"
FORTUNES_LEFT_OUT = {"ascii-art"}


def cp1252_fallback(error):
    """Decodes the few bytes that are not UTF-8 (three in GCIDE: Windows-1252 quotes)."""
    bad = error.object[error.start:error.end]
    return bad.decode("cp1252", errors="replace"), error.end


codecs.register_error("cp1252_fallback", cp1252_fallback)


def decode(data):
    return data.decode("utf-8", errors="cp1252_fallback")


def tidy(lines):
    """The lines of one document: right-stripped, without empty lines (a blank line
    separates documents)."""
    lines = (line.rstrip() for line in lines)
    return "\n".join(line for line in lines if line)


def kjv():
    # -l sets the line width: wide enough that no verse is wrapped, whatever COLUMNS is.
    out = subprocess.run(["bible", "-l100000", BIBLE_RANGE], check=True, capture_output=True).stdout
    verse = re.compile(r"^\s+\d+\s+(.*)$")  # titles ("1 Kings 1") are not indented
    chapter = None
    for line in decode(out).splitlines():
        if not line.strip():
            continue
        m = verse.match(line)
        if m:
            chapter[1].append(m.group(1))
        elif line[0].isspace() and chapter and chapter[1]:
            chapter[1][-1] += " " + line.strip()  # a wrapped verse, should -l not apply
        else:
            if chapter:
                yield "kjv/" + chapter[0], tidy([chapter[0]] + chapter[1])
            chapter = (line.strip(), [])
    if chapter:
        yield "kjv/" + chapter[0], tidy([chapter[0]] + chapter[1])


B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def dictd_number(text):
    value = 0
    for c in text:
        value = value * 64 + B64[c]
    return value


# A tag that only names where a definition came from: "[1913 Webster]", "[WordNet 1.5
# +PJC]", "[Century Dict. 1906]". Usage labels ("[Obs.]", "[Colloq.]") are text and stay.
GCIDE_SOURCE = re.compile(
    r"\[\s*(?:(?:1913 Webster|Webster 1913 Suppl\.|Webster|WordNet(?: \d\.\d| sense [\d+& ]+)?|"
    r"PJC\.?|\[?JC|AS|RDH|RP|GG|Century Dict\.,? 1906\.?)\s*\+?\s*)+\]", re.IGNORECASE)
# dictd's conversion left the next entry's headword after some entries' last source tag:
# "[1913 Webster] applejack".
GCIDE_STRAY_HEADWORD = re.compile(r"(" + GCIDE_SOURCE.pattern + r")\s*\S+$", re.IGNORECASE)


def gcide():
    with gzip.open(GCIDE) as f:
        data = f.read()
    with open(GCIDE_INDEX, "rb") as f:
        index = decode(f.read())
    entries = set()
    for line in index.splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0].startswith("00-database"):
            continue
        entries.add((dictd_number(fields[1]), dictd_number(fields[2])))
    seen = {}
    for offset, length in sorted(entries):
        lines = [" ".join(line.split()) for line in decode(data[offset:offset + length]).splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            continue
        lines[-1] = GCIDE_STRAY_HEADWORD.sub(r"\1", lines[-1])
        doc = tidy(" ".join(GCIDE_SOURCE.sub("", line).split()).replace("{", "").replace("}", "")
                   for line in lines)
        if not doc:
            continue
        headword = doc.split("\n", 1)[0].split(" \\", 1)[0]
        seen[headword] = seen.get(headword, 0) + 1
        yield f"gcide/{headword}/{seen[headword]}", doc


def wordnet():
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET, "data." + pos), "rb") as f:
            content = decode(f.read())
        for line in content.splitlines():
            if line.startswith("  ") or " | " not in line:
                continue  # the license header
            head, gloss = line.split(" | ", 1)
            fields = head.split(" ")
            count = int(fields[3], 16)
            # Adjectives may carry a syntactic marker: "galore(ip)".
            words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in fields[4:4 + 2 * count:2]]
            yield f"wordnet/{pos}/{fields[0]}", tidy([", ".join(words) + ": " + gloss.strip()])


def fortunes():
    overstrike = re.compile(".\b")
    control = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if name in FORTUNES_LEFT_OUT or "." in name or os.path.islink(path) or not os.path.isfile(path):
            continue  # the *.dat indexes and *.u8 links
        with open(path, "rb") as f:
            text = control.sub("", overstrike.sub("", decode(f.read())))
        number = 0
        for fortune in re.split(r"^%$", text, flags=re.MULTILINE):
            doc = tidy(fortune.split("\n"))
            if doc:
                number += 1
                yield f"fortunes/{name}/{number}", doc


SOURCES = [
    ("kjv", kjv, ["bible-kjv", "bible-kjv-text"]),
    ("gcide", gcide, ["dict-gcide"]),
    ("wordnet", wordnet, ["wordnet-base"]),
    ("fortunes", fortunes, ["fortunes", "fortunes-min"]),
]


def is_validation(doc_id):
    digest = hashlib.sha256(doc_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 1000 < VAL_PER_MILLE


def package_version(package):
    result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "not installed"


def write_atomically(path, data):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_english_corpus.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    sources_txt = os.path.join(out_dir, "SOURCES.txt")
    if os.path.exists(sources_txt):
        os.remove(sources_txt)  # incomplete until the new one is written
    splits = {"train": [], "val": []}
    report = []
    for name, documents, packages in SOURCES:
        counts = {"train": [0, 0], "val": [0, 0]}  # documents, bytes of text
        ids = set()
        for doc_id, text in documents():
            assert doc_id not in ids, f"duplicate document id {doc_id}"
            ids.add(doc_id)
            split = "val" if is_validation(doc_id) else "train"
            data = text.encode("utf-8")
            splits[split].append(data)
            counts[split][0] += 1
            counts[split][1] += len(data)
        versions = ", ".join(f"{p} {package_version(p)}" for p in packages)
        report.append(f"{name}: train {counts['train'][0]} documents {counts['train'][1]} bytes, "
                      f"val {counts['val'][0]} documents {counts['val'][1]} bytes ({versions})")
    sizes = {}
    for split, docs in splits.items():
        data = b"\n\n".join(docs) + b"\n"
        sizes[split] = len(data)
        write_atomically(os.path.join(out_dir, split + ".txt"), data)
    lines = ["# pgq English corpus: scripts/make_english_corpus.py (docs/CORPUS.md)",
             f"# validation: documents whose SHA-256(id) mod 1000 < {VAL_PER_MILLE}"]
    lines += report
    lines.append(f"total: train.txt {sizes['train']} bytes, val.txt {sizes['val']} bytes")
    write_atomically(sources_txt, ("\n".join(lines) + "\n").encode("utf-8"))
    print("\n".join(lines[2:]))


if __name__ == "__main__":
    main()
