"""ImageNet-E attribute edits that need no model weights: object size, position, direction.

Importing this package registers them (tag ``"imagenet-e"``, family ``"attribute"``):

- ``obj_size`` (levels ``0.10``, ``0.08``, ``0.05``): object rescaled about its box centre
  to a target object pixel rate (:mod:`.size`);
- ``obj_position`` (``random``): object shrunk to rate 0.05, then its box moved to a seeded
  uniform position (:mod:`.position`);
- ``obj_direction`` (``45``, ``90``, ``180``, ``random``): object rotated (:mod:`.direction`).

The pixels are the official code's on the same frame, mask and draw (the suite's frame is
the photo squashed to 256x256, as the official editor's); docs/imagenet_e.md says what is
bit for bit, what only in distribution, and what differs.

Each needs ``ctx["mask"]`` and pastes the edited object on a background whose object
region was filled by the configured hole-fill backend (:mod:`.fill`: OpenCV by default, the
``ai_bg`` diffusers inpainter as an option). Each reports what it achieved (object pixel
rate, box, angle, high-frequency complexity before/after, fill backend) into
``ctx["attributes"]`` when the caller puts a dict there.
"""

# Registration order is the suite's report order: size, position, direction (the paper's).
from robustlab.shifts.attributes import size  # noqa: F401, I001  (registers obj_size)
from robustlab.shifts.attributes import position  # noqa: F401  (registers obj_position)
from robustlab.shifts.attributes import direction  # noqa: F401  (registers obj_direction)
from robustlab.shifts.attributes._common import (
    ATTRIBUTES_KEY,
    hf_complexity,
    largest_box,
    object_rate,
)
from robustlab.shifts.attributes.fill import describe_hole_fill, hole_fill_context
from robustlab.shifts.registry import register_resource
from robustlab.store.schema import ATTRIBUTE_VALUE_COLUMNS

EDITS = ("obj_size", "obj_position", "obj_direction")
# Columns of <out>/attributes.csv and of the store's attributes table, in order.
ATTRIBUTE_COLUMNS = ATTRIBUTE_VALUE_COLUMNS  # one list, defined with the store's table


def needs_hole_fill(shift) -> bool:
    """True for the shifts whose pixels depend on the hole-fill backend."""
    return shift.family == "attribute" and shift.name in EDITS


# The fill backend is a recorded resource: runs and manifests hold its description, and a
# resumed run or folder refuses another backend, exactly as for ai_bg's inpainter; the
# edits find the run's backend in ctx["hole_fill"].
register_resource(
    "hole_fill",
    load=hole_fill_context,
    describe=lambda settings: describe_hole_fill(settings=settings),
    what="hole-fill backend",
    name_field="backend",
    used_by=needs_hole_fill,
    cell_names_tool=True,
)


__all__ = [
    "EDITS",
    "ATTRIBUTE_COLUMNS",
    "ATTRIBUTES_KEY",
    "hf_complexity",
    "largest_box",
    "object_rate",
    "describe_hole_fill",
    "needs_hole_fill",
]
