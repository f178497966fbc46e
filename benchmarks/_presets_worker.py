"""Times the official generators' corruption functions for benchmarks/presets.py.

Runs inside the reference environment (``benchmarks/.refenv``), never in robustlab's own,
as a child process of ``presets.py`` so that both sides are timed in the same run,
corruption by corruption. The functions are the scripts' own, executed from their
distortion sections as ``presets_reference.py`` does (same two compatibility edits).

Protocol (one JSON object per line):
    argv[1]: the hendrycks/robustness mirror; argv[2]: a folder with the frost textures.
    stdin:   {"script": str, "images": path of a uint8 (N, S, S, 3) .npy, "name": str,
              "index": int, "repeats": int}, or {"quit": true}
    stdout:  first {"ready": true}; then per request {"name", "times": {"<sev>": [cpu s
             per image, one per repeat]}, "error": str or null}
Seeds: ``np.random.seed(1000 * i + 10 * c + s)`` before each call, outside the timed region.
"""

import os

for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "MAGICK_THREAD_LIMIT",
):
    os.environ[_var] = "1"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

warnings.filterwarnings("ignore")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

cv2.setNumThreads(1)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from presets_reference import _corruptions, _show  # noqa: E402


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr
    mirror, frost = Path(sys.argv[1]), Path(sys.argv[2])
    os.chdir(frost)
    scripts: dict = {}
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        try:
            if req["script"] not in scripts:
                scripts[req["script"]] = _corruptions(_show(mirror, req["script"]).decode())
            fn = scripts[req["script"]][req["name"]]
            images = [Image.fromarray(x) for x in np.load(req["images"])]
            c = int(req["index"])
            for s in range(1, 6):  # warm-up: lazy imports, file reads
                np.random.seed(s)
                fn(images[0], s)
            times: dict = {}
            for s in range(1, 6):
                times[str(s)] = []
                for _ in range(int(req["repeats"])):
                    total = 0.0
                    for i, x in enumerate(images):
                        np.random.seed(1000 * i + 10 * c + s)
                        t0 = time.process_time()
                        np.uint8(fn(x, s))
                        total += time.process_time() - t0
                    times[str(s)].append(total / len(images))
            reply = {"name": req["name"], "times": times, "error": None}
        except Exception as exc:  # reported per corruption; the parent prints it
            reply = {"name": req.get("name"), "error": f"{type(exc).__name__}: {exc}"}
            print(traceback.format_exc(), file=sys.stderr)
        print(json.dumps(reply), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
