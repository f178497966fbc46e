"""Surface-variation protocols: train on some styles or subtypes, test on the ones held out.

The ImageNet-C paper measures robustness to *surface variation* with ICONS-50: a network
trained on every icon style but one (say Microsoft's) is tested on the held-out style, and
one trained without some subtypes of each class ("duck" in "bird") is tested on those
subtypes, scored on the broad class. Its control holds out one *version* of icons that have
several (the same vendor's older drawing): accuracy stays high there, so a low score on a
held-out style is about style, not about unseen images. The appendix repeats the subtype
protocol on CIFAR-100 (hold out 1-4 subclasses of each of the 20 superclasses).

Any labelled image set works: a folder with a metadata CSV (``file``, ``class`` and any of
``subtype``, ``style``, ``version``, ``split``), ICONS-50's ``Icons-50.npy``, or CIFAR-100's
``cifar-100-python`` pickles (class = superclass, subtype = subclass, split = its own
train/test). The protocols:

- ``column=value`` (``style=openmoji``): train on rows whose column differs, test on the rest.
- ``subtypes``: N subtypes of each class (seeded choice) or an explicit list are held out;
  test accuracy is on the broad class.
- ``versions``: among (class, subtype, style) icons with several versions, one version each
  (seeded) is held out.

Besides the held-out test, a seeded, class-stratified share of the training pool is kept
aside as an in-distribution test (or the set's own ``split == test`` rows): "how well does
the network do on what it was trained for" beside "on what was held out". A small network is
trained from scratch at 32 x 32 (a small CNN, the paper's ResNeXt / Shake-Shake ResNeXt /
DenseNet / MSDNet-style pairs of :mod:`robustlab.models.networks`, or a timm ResNet with a
3x3 stride-1 stem), and
every protocol is stored as one run (predictions of both tests; shift ``clean`` for the
in-distribution test, shift ``holdout`` with the protocol as level), so ``robustlab results``
and ``robustlab report`` show it. The run id covers the data, the split and the training
config, so a rerun reuses the stored run.
"""

from robustlab.workflows.train.holdout.readers import (
    ICONS50_STYLES,
    META_COLUMNS,
    READERS,
    LabelledSet,
    read_cifar100,
    read_folder,
    read_icons50,
    read_set,
)
from robustlab.workflows.train.holdout.run import (
    HOLDOUT_SHIFT,
    SUITE,
    SUITE_VERSION,
    HoldoutResult,
    run_holdout,
)
from robustlab.workflows.train.holdout.splits import (
    PROTOCOLS,
    HoldoutSplit,
    make_split,
    split_column,
    split_subtypes,
    split_versions,
)
from robustlab.workflows.train.holdout.training import (
    MEAN,
    STD,
    EpochState,
    HoldoutConfig,
    build_network,
    predict,
    train_network,
)

__all__ = [
    "HOLDOUT_SHIFT",
    "ICONS50_STYLES",
    "MEAN",
    "META_COLUMNS",
    "READERS",
    "STD",
    "SUITE_VERSION",
    "PROTOCOLS",
    "SUITE",
    "EpochState",
    "HoldoutConfig",
    "HoldoutResult",
    "HoldoutSplit",
    "LabelledSet",
    "build_network",
    "make_split",
    "predict",
    "read_cifar100",
    "read_folder",
    "read_icons50",
    "read_set",
    "run_holdout",
    "split_column",
    "split_subtypes",
    "split_versions",
    "train_network",
]
