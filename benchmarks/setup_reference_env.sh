#!/usr/bin/env bash
# Build the reference benchmark environment: the original ImageNet-C code (PyPI imagenet-c
# 0.0.3) in a venv of its own, so its old pins (numpy<2, scikit-image 0.20, Wand) never
# touch robustlab's own environment. This is NOT a project dependency: only
# benchmarks/corruptions.py uses it, through a subprocess running benchmarks/_reference_worker.py.
#
# Usage:  bash benchmarks/setup_reference_env.sh [--verify] [VENV_DIR]   (default: benchmarks/.refenv)
#   --verify  also re-run the reference on the 5 photos of ../shared/data/imagenet_c_reference.npz
#             and require bit-identical outputs for every corruption except impulse_noise
#             (its noise comes from scikit-image's own generator); about a minute.
#   env PYTHON=python3.11 selects the interpreter the venv is made from;
#
# Needs: Python 3.11, Debian's libmagickwand-dev (apt-get install libmagickwand-dev; Wand
# loads ImageMagick's C library for motion_blur) and PyPI access. The frost textures that the
# imagenet-c wheel lacks are copied from robustlab's own copy (src/robustlab/data/assets/frost).
#
# Idempotent: re-running reuses the venv, re-applies nothing that is already patched and
# re-copies the textures.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
verify=0
venv="$here/.refenv"
for arg in "$@"; do
    case "$arg" in
        --verify) verify=1 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        -*) echo "error: unknown option $arg" >&2; exit 2 ;;
        *) venv="$arg" ;;
    esac
done
py="${PYTHON:-python3.11}"

if ! command -v "$py" >/dev/null 2>&1; then
    echo "error: $py not found; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if ! "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "error: $py is $("$py" -V 2>&1), the reference pins need Python 3.11" >&2
    exit 1
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libMagickWand'; then
    echo "warning: libMagickWand not found by ldconfig; motion_blur will fail." \
         "Install it with: apt-get install libmagickwand-dev" >&2
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "creating venv $venv"
    "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"

# Versions of the reference era: numpy 1.26 and scikit-image 0.20 are what produced
# ../shared/data/imagenet_c_reference.npz. opencv comes from imagenet-c's own pin
# (opencv-python~=3.4, built for numpy 1.x), scipy 1.11 is of the same era;
# setuptools provides pkg_resources, which the reference uses to find the frost files.
"$vpy" -m pip install --quiet --disable-pip-version-check \
    "imagenet-c==0.0.3" "wand~=0.6.0" "numpy>=1.26,<2" "scikit-image==0.20.*" \
    "scipy==1.11.*" "pillow<11" "setuptools<70"

pkg_dir="$("$vpy" - <<'EOF'
import importlib.util, os
spec = importlib.util.find_spec("imagenet_c")
print(os.path.dirname(spec.origin))
EOF
)"
src="$pkg_dir/corruptions.py"
echo "reference package: $pkg_dir"

# Patch 1: scikit-image >= 0.19 renamed gaussian(..., multichannel=True) to channel_axis=-1.
# Patch 2: numpy >= 1.24 (and 2.x) dropped the np.float_ alias used by clipped_zoom etc.
sed -i 's/multichannel=True/channel_axis=-1/g' "$src"
sed -i 's/np\.float_\b/np.float64/g' "$src"
if grep -q 'multichannel=True\|np\.float_\b' "$src"; then
    echo "error: patching $src failed" >&2
    exit 1
fi
find "$pkg_dir" -name '__pycache__' -type d -prune -exec rm -rf {} +

# Frost textures: the imagenet-c wheel does not ship them; robustlab ships the same six files.
frost_src="$(cd "$(dirname "$0")/.." && pwd)/src/robustlab/data/assets/frost"
mkdir -p "$pkg_dir/frost"
cp -f "$frost_src"/frost* "$pkg_dir/frost/"
echo "frost textures: $(ls "$pkg_dir/frost" | tr '\n' ' ')"

# Smoke test: every one of the 19 reference corruptions runs once on a small image.
"$vpy" - <<'EOF'
import numpy as np
from imagenet_c import corrupt, corruption_tuple
x = (np.random.RandomState(0).rand(224, 224, 3) * 255).astype(np.uint8)
names = [f.__name__ for f in corruption_tuple]
for n in names:
    y = np.asarray(corrupt(x, severity=3, corruption_name=n))
    assert y.shape[:2] == (224, 224), (n, y.shape)
import numpy, skimage, scipy, cv2, wand.version
print(f"reference OK: {len(names)} corruptions; numpy {numpy.__version__}, "
      f"scikit-image {skimage.__version__}, scipy {scipy.__version__}, opencv {cv2.__version__}, "
      f"ImageMagick {wand.version.MAGICK_VERSION}")
EOF

if [ "$verify" = 1 ]; then
    npz="${REFERENCE_NPZ:-$here/../../shared/data/imagenet_c_reference.npz}"
    "$vpy" - "$npz" <<'EOF'
import json, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np
from imagenet_c import corrupt
data = np.load(sys.argv[1])
names = json.loads(str(data["meta"]))["names"]
bad = checked = 0
for c, name in enumerate(names):
    if name == "impulse_noise":  # skimage's random_noise draws from its own generator
        continue
    for s in range(1, 6):
        for i, x in enumerate(data["clean"]):
            np.random.seed(1000 * i + 10 * c + s)  # the seed rule stated in the npz's meta
            checked += 1
            if not np.array_equal(corrupt(x, severity=s, corruption_name=name), data[f"{name}_{s}"][i]):
                bad += 1
                print(f"mismatch: {name} severity {s} image {i}")
print(f"verify: {checked - bad} of {checked} reference outputs reproduced bit for bit")
sys.exit(1 if bad else 0)
EOF
fi
echo "reference env ready: $venv"
