"""A real multi-label task from CLUENER's texts: which of its 10 entity types a text mentions (a measurement tool).

No CLUE dataset is multi-label; CLUENER's texts, each labelled with the set of entity types its spans have (1 to 5 of
10), are real Chinese texts with real, overlapping labels.  MEASUREMENTS.md's multi-label figures come from it:

    .venv/bin/python scripts/cluener_types.py ../shared/data/cluener /tmp/clutypes
    make bundle TASK=/tmp/clutypes/clutypes.yaml

With ``--hierarchy`` each type is a path under one of four groups (``机构##company``: ``GROUPS``), PaddleNLP's
hierarchical layout: the same texts with 14 labels on two levels, task ``clutree`` (``classification.hierarchy_separator``).

It writes ``train.json`` and ``dev.json`` (``{"text": ..., "labels": [...]}``: JSON lists, read as sets) and the task
config beside them, which fine-tunes ``../shared/models/e5-mini6-zh`` (3 epochs) with ``classification.multi_label``.
Keep the written data out of the repository, as the shared data is.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

CONFIG = """\
# Which of CLUENER's 10 entity types a text mentions (written by scripts/cluener_types.py).
task: {task}
type: classification
description: {description}
max_seq_len: 64
classification: {{multi_label: true{tree}}}
data: {{dir: {data}, text_a: text, label_field: labels, labels_file: null}}
model: {{name_or_path: ../shared/models/e5-mini6-zh}}
finetune: {{epochs: 3, batch_size: 32, learning_rate: 1.0e-4}}
gates: {{min_accuracy: 0.5}}
"""


# CLUENER's types grouped by what they name: the first level of --hierarchy's labels
GROUPS = {"address": "地点", "scene": "地点", "book": "作品", "game": "作品", "movie": "作品", "company": "机构",
          "government": "机构", "organization": "机构", "name": "人物", "position": "人物"}


def write(cluener: Path, out: Path, hierarchy: bool = False) -> None:
    task = "clutree" if hierarchy else "clutypes"
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        rows = [json.loads(line) for line in (cluener / f"{split}.json").read_text(encoding="utf-8").splitlines()
                if line.strip()]
        with open(out / f"{split}.json", "w", encoding="utf-8") as f:
            for row in rows:
                labels = sorted(row["label"])
                if hierarchy:  # PaddleNLP's layout: each level's label listed
                    labels = sorted({GROUPS[t] for t in labels} | {f"{GROUPS[t]}##{t}" for t in labels})
                f.write(json.dumps({"text": row["text"], "labels": labels}, ensure_ascii=False) + "\n")
        sizes = Counter(len(row["label"]) for row in rows)
        print(f"{split}: {len(rows)} texts; labels per text: "
              + ", ".join(f"{n}: {sizes[n]}" for n in sorted(sizes)))
    description = ("the entity types a CLUENER text mentions under four groups (hierarchical multi-label, 14 labels)"
                   if hierarchy else "the entity types a CLUENER text mentions (multi-label, 10 labels)")
    tree = ', hierarchy_separator: "##"' if hierarchy else ""
    (out / f"{task}.yaml").write_text(CONFIG.format(task=task, description=description, tree=tree, data=out.resolve()),
                                      encoding="utf-8")
    print(f"wrote {out}/train.json, dev.json and {task}.yaml: make bundle TASK={out}/{task}.yaml")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--hierarchy"]
    if len(args) != 2:
        sys.exit(__doc__)
    write(Path(args[0]), Path(args[1]), hierarchy="--hierarchy" in sys.argv[1:])
