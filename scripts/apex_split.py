"""The committed random split of the apex benchmark repositories into a development half and a
held-out half (issue 20's benchmark discipline).

    python scripts/apex_split.py          # check that both manifests carry the split
    python scripts/apex_split.py --write  # (re)write the split into both manifests

The 23 repositories that earlier sessions tuned the apex rewrite on (``TUNED``) are ``tuned``
and reported on their own. Every other
repository of scripts/apex-corpus.json and scripts/apex-census.json is new: one shuffle with
``random.Random(seed)`` (the seed is written in both manifests) of their sorted names gives the
first half ``dev`` and the rest ``heldout``, so one repository has the same half in both.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "scripts" / "apex-corpus.json"
CENSUS = ROOT / "scripts" / "apex-census.json"
TUNED = frozenset(
    {
        "NVIDIA/DeepLearningExamples",
        "NVIDIA/tacotron2",
        "NVIDIA/mellotron",
        "NVIDIA/waveglow",
        "NVIDIA/flowtron",
        "NVIDIA/semantic-segmentation",
        "NVIDIA/retinanet-examples",
        "NVIDIA/apex",
        "microsoft/Swin-Transformer",
        "jeonsworld/ViT-pytorch",
        "huggingface/transfer-learning-conv-ai",
        "facebookresearch/maskrcnn-benchmark",
        "facebookresearch/XLM",
        "ultralytics/yolov3",
        "allenai/allennlp",
        "ThilinaRajapakse/simpletransformers",
        "rwightman/pytorch-image-models",
        "ultralytics/yolov5",
        "SeanNaren/deepspeech.pytorch",
        "facebookresearch/ClassyVision",
        "kaushaltrivedi/fast-bert",
        "NVIDIA/pix2pixHD",
        "nyu-mll/jiant",
    }
)


def split(repositories: list[str] | set[str], seed: int) -> dict[str, str]:
    """`dev` or `heldout` for each new repository: one shuffle of the sorted names, the first
    half (rounded down) is `dev`."""
    names = sorted(set(repositories))
    random.Random(seed).shuffle(names)
    half = len(names) // 2
    return {name: "dev" if i < half else "heldout" for i, name in enumerate(names)}


def expected(manifests: list[dict]) -> dict[str, str]:
    """The split every manifest must carry, from the seed of the first one."""
    seeds = {m["seed"] for m in manifests}
    if len(seeds) != 1:
        raise ValueError(f"the manifests carry different seeds: {sorted(seeds)}")
    new = {e["repo"] for m in manifests for e in m["entries"]} - TUNED
    halves = split(new, seeds.pop())
    return {**halves, **dict.fromkeys(TUNED, "tuned")}


def problems(manifests: dict[str, dict]) -> list[str]:
    """Every entry whose `split` differs from the recomputed one, by manifest."""
    want = expected(list(manifests.values()))
    found = []
    for label, manifest in manifests.items():
        for entry in manifest["entries"]:
            if entry.get("split") != want[entry["repo"]]:
                found.append(
                    f"{label}: {entry['repo']} is {entry.get('split')!r},"
                    f" the seed says {want[entry['repo']]!r}"
                )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--write", action="store_true", help="write the split into the manifests")
    args = parser.parse_args(argv)
    paths = {"apex-corpus.json": CORPUS, "apex-census.json": CENSUS}
    manifests = {label: json.loads(path.read_text()) for label, path in paths.items()}
    if args.write:
        want = expected(list(manifests.values()))
        for label, manifest in manifests.items():
            for entry in manifest["entries"]:
                entry["split"] = want[entry["repo"]]
            sys.path.insert(0, str(ROOT / "scripts"))
            from apex_census import dumps

            paths[label].write_text(dumps(manifest))
    found = problems(manifests)
    print("\n".join(found) or "the manifests carry the seed's split")
    want = expected(list(manifests.values()))
    for half in ("tuned", "dev", "heldout"):
        repos = {e["repo"] for m in manifests.values() for e in m["entries"]} & {
            r for r, h in want.items() if h == half
        }
        print(f"{half}: {len(repos)} repositories")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
