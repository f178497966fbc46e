"""The one registry of shifts.

Every image change robustlab knows (a corruption, a background scenario, an attribute
edit) is a :class:`Shift`: a pure function plus a table of parameters per level. The CLI,
the suites and the parametrised tests all read this registry, so adding a shift is one
decorated function and its parameter table.

Everything else known about a shift is a field of the same entry, never a table of its
own: what it does to the object (``target``), how its random choices are drawn
(``draw``), and its batched torch version with the per-image inputs that version takes
and its random parts (``batched``, ``batched_needs``, ``parts``), which
:func:`register_batched` fills in from :mod:`robustlab.shifts.batched`. The batched
modules import torch, so they are loaded only on demand (``get_shift(name,
batched=True)``); importing the registry or the exact shifts stays light.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from robustlab.errors import CellSkipped, InputError, MissingResourceError, unknown_name
from robustlab.settings import ToolSettings

ShiftFn = Callable[..., np.ndarray]

# The parameter presets a shift may carry besides its own table: the official ImageNet-C
# generators for other image sizes (hendrycks/robustness ImageNet-C/create_c/), by suite
# name. tiny-imagenet-c and imagenet-64-c come from two scripts whose corruption code is
# the same (make_tinyimagenet_c.py, make_imagenet_64_c.py).
PRESETS = {
    "cifar-c": "CIFAR-10-C / CIFAR-100-C (make_cifar_c.py, 32x32)",
    "tiny-imagenet-c": "Tiny-ImageNet-C (make_tinyimagenet_c.py, 64x64)",
    "imagenet-64-c": "ImageNet 64x64-C (make_imagenet_64_c.py, 64x64)",
    "imagenet-c-299": "ImageNet-C at 299 px (make_imagenet_c_inception.py)",
}


@dataclass(frozen=True)
class RandomParts:
    """A random batched shift split into draws and a deterministic apply.

    Draws are a ``dict[str, torch.Tensor]`` whose values all have the batch dimension
    first, so the draws of single images concatenate into a batch's. Fidelity then splits
    into two checks that need no model: the apply fed the exact path's draws must give the
    exact path's pixels (``robustlab.shifts.batched.apply_matched``), and the torch draws
    must follow the same distribution as the replayed ones.

    Attributes:
        draw: ``draw(x, params, gens) -> draws``, one torch generator per image.
        apply: ``apply(x, params, draws, **context) -> (N, 3, H, W) uint8``, no randomness
            left; ``context`` is the entry's ``batched_needs`` (the scenes' masks).
        replay: ``replay(img, params, rng) -> draws`` for one (H, W, 3) uint8 numpy image
            and the generator the exact path would get (batch dimension 1): the exact
            path's draws, made by the exact module's own draw code in its own order, in
            this layout.
        matched_mad: The mean absolute pixel difference (levels of 0..255) allowed
            between ``apply`` on replayed draws and the exact path; 0 means identical.
            Non-zero only where the arithmetic differs (float32 against float64, a
            bilinear warp), and the batched module's docstring says where.
    """

    draw: Callable
    apply: Callable
    replay: Callable
    matched_mad: float = 0.0

    def __call__(self, x, params, gens, **context):
        """The batched shift: ``apply(x, params, draw(x, params, gens), **context)``."""
        return self.apply(x, params, self.draw(x, params, gens), **context)


@dataclass(frozen=True)
class Shift:
    """A registered family of image changes with discrete levels.

    Attributes:
        name: Unique registry key, e.g. ``"glass_blur"``.
        family: Group used for reporting, e.g. ``"blur"`` or ``"background"``.
        fn: ``fn(image, params, rng, ctx) -> image``; ``params`` is ``self.params[level]``.
        params: Level -> parameters (a tuple, dataclass or mapping); the keys are the levels.
        needs: Context keys the shift requires, e.g. ``{"mask"}``.
        deterministic: True when the output does not depend on the random generator.
        tags: Free-form groups (``"imagenet-c"``, ``"imagenet-c-extra"``, ...).
        doc: One-line description (first docstring line of ``fn``).
        target: What the shift does to the object, for the workflows that score against
            its mask (segmentation, saliency): ``"same"`` (the object keeps its pixels'
            place), ``"moved"`` (placed elsewhere; the true mask is the placement replayed
            from the cell's seed) or None (the object is gone: no foreground, the cell is
            skipped). One field of the shift's entry, so a new scene states it where it
            is registered.
        draw: ``draw(image, params, rng, ctx) -> dict``: every random choice the shift
            makes (a scene's hue, where it moves the object), drawn in the shift's own
            order; ``fn`` draws through it, and whoever needs the choices (the batched
            replay, the moved object's true mask) calls it instead of repeating the draw
            order. None: a deterministic shift, or one whose draws are not needed
            elsewhere. A ``"moved"`` target's draws hold ``offset``: the object's
            ``(dx, dy)``.
        batched: The batched torch version, ``batched(x, params, gens, **context) ->
            (N, 3, H, W) uint8`` (see :func:`register_batched`); None: only the exact one.
        batched_needs: The per-image inputs ``batched`` takes as keyword arguments:
            ``"masks"`` (N, H, W) bool foreground, ``"boxes"`` (N, 4) int64 object boxes
            ``(x0, y0, x1, y1)``, exclusive ends.
        parts: A random ``batched`` split into draw, apply and replay; None for a
            deterministic one.
        extra: Further keys of ``register_shift`` (``donor_rule``, ``channels``,
            ``random_only_with``: what makes a shift that is not deterministic draw at all,
            when by default it draws nothing, such as obj_size's configured hole fill).
        presets: Preset name (:data:`PRESETS`) -> a parameter table with the same levels
            as ``params``: the constants of that official generator. See :meth:`preset`.
        preset_name: The preset whose table ``params`` is (None: the shift's own).
        monotone: True when a higher level changes the image more (the mean absolute
            change from the clean image does not fall from one level to the next); the
            registry-driven tester (tests/test_every_shift.py) checks it. False where the
            levels are not ordered by strength (scenes, edit directions) or where an
            official table is not (five of ImageNet-C's, kept faithful).
    """

    name: str
    family: str
    fn: ShiftFn
    params: Mapping[Hashable, Any]
    needs: frozenset[str] = frozenset()
    deterministic: bool = False
    tags: frozenset[str] = frozenset()
    doc: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    target: str | None = "same"
    draw: Callable[..., dict] | None = None
    batched: Callable | None = None
    batched_needs: tuple[str, ...] = ()
    parts: RandomParts | None = None
    presets: Mapping[str, Mapping[Hashable, Any]] = field(default_factory=dict)
    preset_name: str | None = None
    monotone: bool = False

    @property
    def levels(self) -> tuple:
        return tuple(self.params)

    def preset(self, name: str | None) -> Shift:
        """This shift drawing from preset ``name``'s table (None: its own table).

        The same function, name, seed rule and levels; only ``params`` differ, so every
        caller that applies ``shift.params[level]`` (the pipeline, the manifest's record of
        the parameters) follows the preset without knowing of it. The batched versions
        implement ImageNet-C's own tables only: evaluate refuses ``--shift-device`` with a
        preset.

        Raises:
            InputError: the shift has no table for ``name``.
        """
        if name is None or name == self.preset_name:
            return self
        if name not in self.presets:
            have = ", ".join(sorted(self.presets)) or "none"
            raise InputError(f"shift {self.name!r} has no preset {name!r} (its presets: {have})")
        return _preset_view(self, name)

    def apply(
        self, image: np.ndarray, level: Hashable, rng: Any = None, ctx: Mapping | None = None
    ):
        """Apply the shift at ``level`` with random generator ``rng`` and context ``ctx``."""
        if level not in self.params:
            raise CellSkipped(
                f"{self.name}: level {level!r} is not defined; levels are {list(self.levels)}"
            )
        ctx = dict(ctx or {})
        if self.needs:  # most shifts need nothing: no sorting and scanning per call
            why = self.missing_context(ctx)
            if why:
                raise CellSkipped(why)
        return self.fn(image, self.params[level], rng, ctx)

    def missing_context(self, ctx: Mapping) -> str | None:
        """Why ``ctx`` cannot serve this shift (the needed keys it lacks), or None."""
        missing = [k for k in sorted(self.needs) if ctx.get(k) is None]
        return f"{self.name} needs {', '.join(missing)} in its context" if missing else None


_REGISTRY: dict[str, Shift] = {}
_PRESET_VIEWS: dict[tuple[str, str], Shift] = {}


def _preset_view(shift: Shift, name: str) -> Shift:
    """``shift`` with preset ``name``'s table as its params, made once per entry."""
    key = (shift.name, name)
    view = _PRESET_VIEWS.get(key)
    base = _REGISTRY.get(shift.name, shift)
    if view is None or view.fn is not base.fn or view.batched is not base.batched:
        view = replace(base, params=dict(base.presets[name]), preset_name=name)
        _PRESET_VIEWS[key] = view
    return view


# The values of Shift.target.
TARGETS = ("same", "moved", None)


def register_shift(
    name: str,
    *,
    family: str,
    params: Mapping[Hashable, Any],
    needs: Iterable[str] = (),
    deterministic: bool = False,
    tags: Iterable[str] = (),
    target: str | None = "same",
    draw: Callable[..., dict] | None = None,
    presets: Mapping[str, Mapping[Hashable, Any]] | None = None,
    monotone: bool = False,
    **extra: Any,
) -> Callable[[ShiftFn], ShiftFn]:
    """Decorator that registers ``fn`` as the shift ``name``.

    A random shift whose choices others need gives ``draw`` (see :attr:`Shift.draw`) and
    makes them in ``fn`` by calling it first. ``presets`` maps names of :data:`PRESETS`
    to further parameter tables with the same levels (see :meth:`Shift.preset`).

    Example:
        >>> @register_shift("invert", family="digital", params={1: 1.0}, deterministic=True)
        ... def invert(x, p, rng, ctx):
        ...     return 255 - x
    """
    if not params:
        raise ValueError(f"shift {name!r} needs at least one level")
    if target not in TARGETS:
        raise ValueError(f"shift {name!r}: target must be one of {TARGETS}, not {target!r}")
    if target == "moved" and draw is None:
        raise ValueError(f"shift {name!r}: a moved target needs the draw that moves it")
    presets = {k: dict(v) for k, v in (presets or {}).items()}
    for key, table in presets.items():
        if key not in PRESETS:
            raise ValueError(f"shift {name!r}: unknown preset {key!r}; use {sorted(PRESETS)}")
        if list(table) != list(params):
            raise ValueError(f"shift {name!r}: preset {key!r} has levels {list(table)}")

    def deco(fn: ShiftFn) -> ShiftFn:
        if name in _REGISTRY and _REGISTRY[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"shift {name!r} is already registered")
        doc = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = Shift(
            name=name,
            family=family,
            fn=fn,
            params=dict(params),
            needs=frozenset(needs),
            deterministic=deterministic,
            tags=frozenset(tags),
            doc=doc[0] if doc else "",
            extra=dict(extra),
            target=target,
            draw=draw,
            presets=presets,
            monotone=monotone,
        )
        return fn

    return deco


# The value of Shift.batched_needs entries: what the batched scenes take per image.
BATCHED_INPUTS = ("masks", "boxes")
# Modules whose import registers the batched versions (torch); loaded by
# get_shift(name, batched=True) only.
BATCHED_MODULES = ("robustlab.shifts.batched",)


def register_batched(
    name: str,
    *,
    needs: Iterable[str] = (),
    draw: Callable | None = None,
    replay: Callable | None = None,
    matched_mad: float = 0.0,
) -> Callable[[Callable], Callable]:
    """Decorator that makes its function the batched version of the registered shift ``name``.

    A batched version is another way to draw the *same* shift (same name, same per-level
    parameters), so it is a field of that shift's entry, not a shift of its own. Without
    ``draw``, the function is ``fn(x, params, gens, **context)``: ``x`` an (N, 3, H, W)
    uint8 tensor, ``params`` the level's entry of the shift's table, ``gens`` one
    ``torch.Generator`` per image on ``x``'s device, ``context`` the inputs named in
    ``needs`` (:data:`BATCHED_INPUTS`). With ``draw`` and ``replay``, the function is the
    deterministic ``apply(x, params, draws, **context)`` of a :class:`RandomParts`.

    Raises:
        ValueError: ``name`` is no registered shift, already has a batched version, or
            ``needs`` names an unknown input; TypeError: only one of ``draw``/``replay``.
    """
    needs = tuple(needs)
    bad = [k for k in needs if k not in BATCHED_INPUTS]
    if bad:
        raise ValueError(f"batched {name!r}: unknown inputs {bad}; use {BATCHED_INPUTS}")
    if (draw is None) != (replay is None):
        raise TypeError(f"batched {name!r}: give both draw and replay, or neither")

    def deco(fn: Callable) -> Callable:
        _ensure_loaded()
        entry = _REGISTRY.get(name)
        if entry is None:
            raise ValueError(f"batched version of {name!r}, which is no registered shift")
        if entry.batched is not None:
            raise ValueError(f"shift {name!r} already has a batched version")
        parts = None
        if draw is not None and replay is not None:  # both or neither: checked above
            parts = RandomParts(draw, fn, replay, float(matched_mad))
        batched = fn if parts is None else parts
        _REGISTRY[name] = replace(entry, batched=batched, batched_needs=needs, parts=parts)
        return fn

    return deco


# Modules whose import registers shifts; loaded lazily so that importing the registry
# alone has no side effects. A new family adds its module here.
FAMILY_MODULES = (
    "robustlab.shifts.corruptions",
    "robustlab.shifts.scenes",
    "robustlab.shifts.generative",
    "robustlab.shifts.attributes",
)


@dataclass(frozen=True)
class Resource:
    """A tool from the user's configuration, not from the sample, that pixels depend on.

    Every callable takes the run's :class:`~robustlab.settings.ToolSettings`
    (resolved by the planner and shipped with the work), never a process-wide setting.

    Two kinds. A *loaded* resource is a context entry: some shifts need a heavy, optional
    tool (a diffusion inpainter for ``ai_bg``), name its key in ``needs``, and the module
    providing the tool registers how to tell whether it is configured (cheap, no loading)
    and how to load it (once per process). A *recorded* resource has no ``check``: it is
    always there (the attribute edits' hole-fill backend, ``patch`` by default), ``used_by``
    says which shifts depend on it, its description is recorded, and its ``load`` (if any)
    gives those shifts ``ctx[key]``.

    Attributes:
        key: The ``ctx`` / run-config key, e.g. ``"inpainter"``.
        check: ``(settings) -> None`` when configured, else a one-line hint on how to
            configure it (None: a recorded resource).
        load: ``(settings) -> value`` put into ``ctx[key]``.
        describe: ``(settings) -> dict`` naming the configured tool (path,
            ``fingerprint``...) without loading it; recorded in runs and manifests, because
            the pixels a shift draws depend on it. None: nothing to record.
        what: How messages name the resource (empty: its key).
        name_field: The description's field that names the configured tool in messages.
        used_by: Which shifts' pixels depend on it (None: those naming ``key`` in ``needs``).
        cell_names_tool: A manifest cell records ``"<label> <fingerprint>"`` instead of
            the fingerprint alone: for a tool whose label is a short name (the hole-fill
            backend, ``patchmatch``) rather than a long checkpoint path, so the cell
            says which backend drew it. The format is part of the cell's identity, so it
            must not change for a registered resource (a folder would refuse to resume).
    """

    key: str
    check: Callable[[ToolSettings], str | None] | None = None
    load: Callable[[ToolSettings], Any] | None = None
    describe: Callable[[ToolSettings], dict] | None = None
    what: str = ""
    name_field: str = "path"
    used_by: Callable[[Shift], bool] | None = None
    cell_names_tool: bool = False

    @property
    def noun(self) -> str:
        return self.what or self.key

    def uses(self, shift: Shift) -> bool:
        """Whether ``shift``'s pixels depend on this resource."""
        return self.used_by(shift) if self.used_by is not None else self.key in shift.needs

    def label(self, description: dict) -> str:
        """The configured tool a description names (a checkpoint path, a backend)."""
        return str(description.get(self.name_field))

    def cell_value(self, description: dict | None) -> str | None:
        """What a manifest cell drawn with this tool records (see ``cell_names_tool``)."""
        description = description or {}
        if self.cell_names_tool:
            return f"{self.label(description)} {description.get('fingerprint')}"
        return description.get("fingerprint")


_RESOURCES: dict[str, Resource] = {}


def register_resource(
    key: str,
    *,
    check: Callable[[ToolSettings], str | None] | None = None,
    load: Callable[[ToolSettings], Any] | None = None,
    describe: Callable[[ToolSettings], dict] | None = None,
    what: str = "",
    name_field: str = "path",
    used_by: Callable[[Shift], bool] | None = None,
    cell_names_tool: bool = False,
) -> None:
    """Declare how the context key ``key`` is checked, filled and described from configuration.

    A loaded resource gives ``check`` and ``load``; a recorded one no ``check``, but
    ``describe`` and ``used_by`` (see :class:`Resource`).
    """
    if check is not None and load is None:
        raise TypeError(f"resource {key!r}: a checked resource needs load")
    if check is None and (describe is None or used_by is None):
        raise TypeError(f"recorded resource {key!r} needs describe and used_by")
    _RESOURCES[key] = Resource(
        key, check, load, describe, what, name_field, used_by, cell_names_tool
    )
    _LOADERS.clear()


def get_resource(key: str) -> Resource:
    """The registered resource ``key`` (KeyError: none)."""
    _ensure_loaded()
    return _RESOURCES[key]


def described_resources() -> list[str]:
    """Keys of the resources that describe themselves (recorded with runs and manifests)."""
    _ensure_loaded()
    return [k for k in _in_family_order(_RESOURCES) if _RESOURCES[k].describe is not None]


def resource_nouns() -> dict[str, str]:
    """Each described resource's record field and the tool's name (``"inpainter"``...),
    for the manifest's comparison of a folder's cells (:func:`manifest.identity_changes`)."""
    return {key: get_resource(key).noun for key in described_resources()}


def _in_family_order(resources: dict[str, Resource]) -> list[str]:
    """Resource keys in the order a fresh process registers them (family by family, as
    :data:`FAMILY_MODULES` loads them), whichever family module happened to be imported
    first: manifests write one key per resource in this order, so their bytes must not
    depend on what else the process imported before."""

    def family(key: str) -> int:
        fn = resources[key].describe or resources[key].check
        module = getattr(fn, "__module__", "") or ""
        for i, prefix in enumerate(FAMILY_MODULES):
            if module == prefix or module.startswith(prefix + "."):
                return i
        return len(FAMILY_MODULES)

    return sorted(resources, key=family)  # stable: registration order within a family


def recorded_resources(shifts: Iterable[Shift]) -> list[str]:
    """Keys of the self-describing resources whose tools ``shifts``' pixels depend on.

    The one place that decides what a run or a generated folder records: loaded resources
    named in ``needs`` and recorded ones (the hole-fill backend) by their ``used_by``.
    """
    _ensure_loaded()
    shifts = list(shifts)
    return [
        k
        for k, r in sorted(_RESOURCES.items())
        if r.describe is not None and any(r.uses(sh) for sh in shifts)
    ]


def _tools(settings: ToolSettings | None) -> ToolSettings:
    """The run's settings; None (a caller that plans nothing, e.g. a notebook): the
    environment's."""
    return settings if settings is not None else ToolSettings.from_environment()


def describe_resources(
    shifts: Iterable[Shift], settings: ToolSettings | None = None
) -> dict[str, dict]:
    """``{key: description}`` of the self-describing resources ``shifts`` depend on, as
    ``settings`` configure them."""
    tools = _tools(settings)
    return {
        k: describe(tools)
        for k in recorded_resources(shifts)
        if (describe := _RESOURCES[k].describe) is not None
    }


def needs_resource(shift: Shift) -> bool:
    """True when ``shift`` needs a configured resource (it is optional in its suite)."""
    _ensure_loaded()
    return any(k in _RESOURCES for k in shift.needs)


def missing_resource(shift: Shift, settings: ToolSettings | None = None) -> str | None:
    """Why ``shift`` cannot run with ``settings`` (a resource it needs is not configured),
    or None."""
    _ensure_loaded()
    tools = _tools(settings)
    for key in sorted(shift.needs):
        res = _RESOURCES.get(key)
        hint = res.check(tools) if res is not None and res.check is not None else None
        if hint:
            return f"{shift.name}: no usable {key} ({hint})"
    return None


def resource_context(shift: Shift, settings: ToolSettings | None = None) -> dict[str, Any]:
    """The resources ``shift`` uses, as ``settings`` configure them, loaded (``{}`` for
    most shifts)."""
    loaders = _loaders(shift)
    if not loaders:  # most shifts: asked once per cell, answered without a scan
        return {}
    tools = _tools(settings)
    return {k: load(tools) for k, load in loaders}


# (name, fn, needs, extra) of a shift -> the (key, load) of each resource it uses: which
# resources a shift uses is fixed by those fields, and scanning every resource per cell cost
# 15 us of a 32x32 cell's 100. Emptied when a resource is registered.
_LOADERS: dict[tuple, tuple[tuple[str, Callable], ...]] = {}


def _loaders(shift: Shift) -> tuple[tuple[str, Callable], ...]:
    key = (shift.name, shift.fn, shift.needs, id(shift.extra))
    found = _LOADERS.get(key)
    if found is None:
        _ensure_loaded()
        found = tuple(
            (k, load)
            for k, res in sorted(_RESOURCES.items())
            if (load := res.load) is not None and res.uses(shift)
        )
        _LOADERS[key] = found
    return found


def available_shifts(
    names: Iterable[str], settings: ToolSettings | None = None, *, log=None
) -> list[str]:
    """``names`` without the shifts whose resources ``settings`` do not configure, each
    dropped one logged as a warning with the hint; so a suite such as ``ximagenet12`` runs
    everywhere and gains ``ai_bg`` once an inpainter is configured.

    Raises:
        MissingResourceError: every requested shift is unavailable (the first hint says why).
    """
    import logging

    log = log or logging.getLogger("robustlab")
    tools = _tools(settings)
    names = list(names)
    kept, reasons = [], []
    for n in names:
        why = missing_resource(get_shift(n), tools)
        if why:
            reasons.append(why)
            log.warning("skipping %s", why)
        else:
            kept.append(n)
    if names and not kept:
        raise MissingResourceError(f"cannot run {reasons[0]}")
    return kept


_LOADED: list[bool] = []


def _ensure_loaded() -> None:
    """Import the family modules once. Later calls cost a list check: every lookup calls
    this, and four ``import_module`` calls were 15 us of a 32x32 corruption's 50 us."""
    if _LOADED:
        return
    for module in FAMILY_MODULES:
        importlib.import_module(module)
    _LOADED.append(True)


def get_shift(name: str, *, batched: bool = False, preset: str | None = None) -> Shift:
    """Return the registered shift ``name`` or raise InputError naming the closest ones.

    Args:
        batched: Load the batched versions first (imports torch), so the entry's
            ``batched``, ``batched_needs`` and ``parts`` are filled in. Without it they
            are filled only if something already imported :mod:`robustlab.shifts.batched`.
        preset: Draw from this preset's parameter table (:meth:`Shift.preset`).
    """
    _ensure_loaded()
    if batched:
        for module in BATCHED_MODULES:
            importlib.import_module(module)
    try:
        shift = _REGISTRY[name]
    except KeyError:
        raise unknown_name("shift", name, _REGISTRY, listing="robustlab list shifts") from None
    return shift.preset(preset)


def list_shifts(pattern: str | None = None, *, tag: str | None = None) -> list[Shift]:
    """Registered shifts in registration order, filtered by name glob, family or tag."""
    _ensure_loaded()
    out = list(_REGISTRY.values())
    if tag is not None:
        out = [s for s in out if tag in s.tags]
    if pattern:
        out = [
            s
            for s in out
            if fnmatch.fnmatchcase(s.name, pattern) or s.family == pattern or pattern in s.tags
        ]
    return out
