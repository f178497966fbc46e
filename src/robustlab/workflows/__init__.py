"""Workflows: one user-visible job each (a command's body), above the execution machinery.

``evaluate`` (a model on a suite's cells), ``generate`` (a shifted image folder),
``segment`` and ``saliency`` (models scored against object masks), ``train`` (training
methods, protocols and the surface-variation hold-out), ``report`` (the HTML report), and
ImageNet-D's chain in ``imagenet_d`` (``synth`` → ``mine`` → ``review``, and ``vlm``).
Each plans (validate, identity, record), runs through :mod:`robustlab.execution` and stores
through :mod:`robustlab.store`; nothing below this layer imports from here.
"""
