"""Times the original ImageNet-C code (PyPI ``imagenet-c`` 0.0.3) for benchmarks/corruptions.py.

Runs inside the reference environment (``benchmarks/.refenv``, built by
``setup_reference_env.sh``), never in robustlab's own: the reference needs numpy<2,
scikit-image 0.20 and Wand, which robustlab must not depend on. It is a child process so
that both sides are timed in the same run, interleaved corruption by corruption, and so
share whatever load the machine has at that moment.

Protocol (one JSON object per line):
    argv[1]: path of a .npy file, uint8 (N, 224, 224, 3), the prepared images.
    stdin:   {"name": str, "index": int, "severities": [int], "repeats": int}, or {"quit": true}
    stdout:  first line {"ready": true, "versions": {...}}; then one reply per request:
             {"name", "first_call": {"wall", "cpu"}, "times": {"<sev>": [{"wall", "cpu"}, ...]},
              "error": str or null}
    Each entry of ``times[sev]`` is one repeat: the mean seconds per call over all N images.
Seeds follow ``../shared/data/imagenet_c_reference.npz``: ``np.random.seed(1000*i + 10*c + s)``
before each call (outside the timed region), with i the image, c the corruption's index in
the reference order, s the severity.

Not a robustlab module and imported by nothing: it only runs under the reference's Python.
"""

import os

# Single-threaded, set before numpy/scipy/cv2 load their thread pools.
for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "MAGICK_THREAD_LIMIT",
):
    os.environ[_var] = "1"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore")  # pkg_resources and skimage deprecations would clutter stderr

import cv2  # noqa: E402
import numpy as np  # noqa: E402

cv2.setNumThreads(1)

from imagenet_c import corrupt  # noqa: E402


def _call(x, name, severity, seed):
    np.random.seed(seed)
    w0, c0 = time.perf_counter(), time.process_time()
    corrupt(x, severity=severity, corruption_name=name)
    return time.perf_counter() - w0, time.process_time() - c0


def _time_corruption(images, name, index, severities, repeats):
    def seed(i, s):
        return 1000 * i + 10 * index + s

    wall, cpu = _call(images[0], name, severities[0], seed(0, severities[0]))
    first = {"wall": wall, "cpu": cpu}
    for s in severities:  # warm-up: caches, lazily loaded files, allocator
        _call(images[0], name, s, seed(0, s))
    times = {str(s): [] for s in severities}
    for _ in range(repeats):
        for s in severities:
            tw = tc = 0.0
            for i, x in enumerate(images):
                w, c = _call(x, name, s, seed(i, s))
                tw += w
                tc += c
            times[str(s)].append({"wall": tw / len(images), "cpu": tc / len(images)})
    return {"name": name, "first_call": first, "times": times, "error": None}


def main() -> int:
    # The protocol owns the real stdout; anything the libraries print goes to stderr.
    out = sys.stdout
    sys.stdout = sys.stderr
    images = np.load(sys.argv[1])
    import PIL
    import scipy
    import skimage
    import wand.version

    versions = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-image": skimage.__version__,
        "opencv": cv2.__version__,
        "pillow": PIL.__version__,
        "imagemagick": wand.version.MAGICK_VERSION,
    }
    print(json.dumps({"ready": True, "versions": versions}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        try:
            reply = _time_corruption(
                images,
                req["name"],
                int(req["index"]),
                [int(s) for s in req["severities"]],
                int(req["repeats"]),
            )
        except Exception as exc:  # reported per corruption; the parent prints it
            reply = {
                "name": req.get("name"),
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        print(json.dumps(reply), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
