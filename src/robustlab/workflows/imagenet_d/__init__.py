"""ImageNet-D's chain, one home: ``synth`` (the class × nuisance prompt grid drawn with a
diffusion model), ``mine`` (keep what the surrogate models fail on), ``review`` (people
verify the kept images), ``vlm`` (the vision-language protocol).

Its components live by kind below this layer: the generative shifts in
:mod:`robustlab.shifts.generative`, its tables in :mod:`robustlab.store` (``mining``,
``reviews``, ``vlm``), the published layout in :mod:`robustlab.data.published`.
"""
