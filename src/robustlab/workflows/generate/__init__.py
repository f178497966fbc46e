"""``generate``: write a suite's shifted images to disk in the published layout.

Output: ``<out>/<shift>/<level>/<class>/<file>`` plus ``<out>/manifest.json``, and
``<out>/attributes.csv`` when a shift reports what it achieved per image (the ImageNet-E
attribute edits: object pixel rate, box, angle, complexity before/after, fill backend).

How it stays correct when things go wrong:

- **One work unit per source image.** A worker decodes and prepares the image once and
  writes all of its cells from that, so decoding is never repeated and memory stays flat
  (a bounded number of images is in flight, whatever the dataset size).
- **Seed rule.** Every cell draws from ``derive_seed(seed, sample.id, shift, level)``, so
  the files are identical for any worker count or order.
- **Atomic writes.** A cell is written to a hidden temp file in its own folder and moved
  into place with ``os.replace``; a killed run leaves only temp files, never a
  half-written image. A rerun removes the temp files and skips cells whose file exists.
  ``out`` may also be an fsspec URL (``s3://bucket/prefix``): object stores get one atomic
  PUT per file, other filesystems the temp-and-move (:mod:`robustlab.files.outputs`).
- **Bad input never stops a run.** A source that cannot be decoded or prepared is
  skipped with its reason; a cell that this input cannot make (the shift raised
  :class:`~robustlab.errors.CellSkipped`) is counted as failed with its reason; a worker
  process that crashes is replaced and its images are retried, then skipped. Everything
  lands in the manifest. Any other exception is a bug: it stops the run (exit 70), and
  the rerun resumes from the files written.
- **One identity per folder.** The manifest, with what decides the pixels, is written
  before the first file; a rerun under other settings or from changed sources is refused
  (:mod:`robustlab.records.manifest`), so a killed run never resumes under another seed.

The package: :mod:`~robustlab.workflows.generate.request` (the three frozen specs of a
call), :mod:`~robustlab.workflows.generate.plan` (cells, sources and the folder's identity,
decided before the folder is touched), :mod:`~robustlab.workflows.generate.worker` (the
work unit and its pools), :mod:`~robustlab.workflows.generate.record` (the manifest's
merge; the rules of every folder record are :mod:`robustlab.records.folder_record`'s),
:mod:`~robustlab.workflows.generate.attributes` (``attributes.csv``) and
:mod:`~robustlab.workflows.generate.core` (:func:`generate`, which runs them in order).

Small sources: with the default protocol (resize the shorter side to 256) they are
upscaled, as the reference pipeline does. Without a resize (``keep_size``) a source below
32x32, or below the crop size, is skipped with the reason ``too small: ...``.
"""

from robustlab.records.manifest import MANIFEST
from robustlab.files.atomic import TEMP_SUFFIX, atomic_write, remove_temp_files
from robustlab.workflows.generate.attributes import (
    ATTRIBUTES_CSV,
    merge_attributes_csv,
    parse_attributes_csv,
    read_attributes_csv,
    write_attributes_csv,
)
from robustlab.workflows.generate.core import generate
from robustlab.workflows.generate.record import GenerateResult
from robustlab.workflows.generate.request import (
    GenerateCells,
    GenerateExecution,
    GenerateInputs,
)
from robustlab.workflows.generate.worker import SampleOutcome, process_sample

__all__ = [
    "generate",
    "GenerateCells",
    "GenerateInputs",
    "GenerateExecution",
    "GenerateResult",
    "read_attributes_csv",
    "write_attributes_csv",
    "parse_attributes_csv",
    "merge_attributes_csv",
    "TEMP_SUFFIX",
    "ATTRIBUTES_CSV",
    "SampleOutcome",
    "process_sample",
    "atomic_write",
    "remove_temp_files",
    "MANIFEST",
]
