"""Settings of the optional tools some shifts use, as one value that travels with the work.

``ai_bg``'s diffusion inpainter, ``bg_complexity``'s diffusion model (and the adversarial
level's classifier) and the attribute edits' hole-fill backend decide pixels, so a shift
computed in a worker must use the very tool that the run record describes, even on a Ray
worker that started before the run was planned, or on another node. So:

* a request names them as fields (the ``--inpainter``, ``--bg-diffusion``, ``--edit-fill``...
  flags; the same keywords of :func:`robustlab.evaluate` and ``generate``): a
  :class:`ToolSettings`;
* planning resolves it once (:meth:`ToolSettings.resolved`): a field left out takes the
  environment variable of :data:`VARIABLES`, the documented default and the only place
  robustlab reads them, then describes the tools from that value into the run record and
  puts the same value in the work it ships (generate's job, the evaluation's
  :class:`~robustlab.execution.tasks.CellImages`);
* a worker hands that value to every tool it loads (``shift_context``); it reads nothing
  else, neither its own environment nor a process-wide setting.

Code that calls a tool with no settings (a shift applied in a notebook) gets
:meth:`ToolSettings.from_environment`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from robustlab.errors import InputError

PathProblem = Callable[[str | Path], str | None]

# Field -> the environment variable that is its default (the names users set today).
VARIABLES = {
    "inpainter": "ROBUSTLAB_INPAINTER",
    "inpainter_device": "ROBUSTLAB_INPAINTER_DEVICE",
    "inpainter_dtype": "ROBUSTLAB_INPAINTER_DTYPE",
    "bg_diffusion": "ROBUSTLAB_BG_DIFFUSION",
    "bg_diffusion_device": "ROBUSTLAB_BG_DIFFUSION_DEVICE",
    "bg_diffusion_dtype": "ROBUSTLAB_BG_DIFFUSION_DTYPE",
    "bg_adv_model": "ROBUSTLAB_BG_ADV_MODEL",
    "edit_fill": "ROBUSTLAB_EDIT_FILL",
}
# The attribute edits' hole-fill backends (robustlab.shifts.attributes.fill), and the
# compute dtypes of the diffusion tools: checked when the settings are made, before any work.
EDIT_FILL_BACKENDS = ("patch", "telea", "ns", "diffusers")
DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class ToolSettings:
    """The optional tools' settings one run is planned and computed with.

    None means "not given": :meth:`resolved` fills it from the environment variable of the
    field (:data:`VARIABLES`), and a tool still without a value uses its own default (no
    inpainter: ``ai_bg`` is skipped; no ``edit_fill``: ``patch``).

    Attributes:
        inpainter: ``ai_bg``'s local diffusers inpainting checkpoint folder (also the
            ``diffusers`` hole fill's); ``inpainter_device`` / ``inpainter_dtype`` how it runs.
        bg_diffusion: ``bg_complexity``'s guided-diffusion ``.pt`` file or diffusers UNet
            folder; ``bg_diffusion_device`` / ``bg_diffusion_dtype`` how it runs.
        bg_adv_model: The model spec of ``bg_complexity_adv``'s classifier.
        edit_fill: The attribute edits' hole-fill backend (:data:`EDIT_FILL_BACKENDS`).

    Raises:
        InputError: an unknown backend or dtype (one line, naming the flag and the variable).
    """

    inpainter: str | None = None
    inpainter_device: str | None = None
    inpainter_dtype: str | None = None
    bg_diffusion: str | None = None
    bg_diffusion_device: str | None = None
    bg_diffusion_dtype: str | None = None
    bg_adv_model: str | None = None
    edit_fill: str | None = None

    def __post_init__(self) -> None:
        for name in VARIABLES:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            if not isinstance(value, str):
                raise InputError(f"{flag(name)} must be text, got {value!r}", hint=_hint_of(name))
            text = value.strip() or None
            if text and name == "edit_fill":
                text = text.lower()
            object.__setattr__(self, name, text)
        _check_choice(self, "edit_fill", EDIT_FILL_BACKENDS)
        _check_choice(self, "inpainter_dtype", DTYPES)
        _check_choice(self, "bg_diffusion_dtype", DTYPES)

    def resolved(self, environ: Mapping[str, str] | None = None) -> ToolSettings:
        """These settings with every field left out taken from its environment variable
        (``environ``, default ``os.environ``): the one place robustlab reads them."""
        env = os.environ if environ is None else environ
        return ToolSettings(
            **{name: getattr(self, name) or env.get(var) or None for name, var in VARIABLES.items()}
        )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ToolSettings:
        """The settings of the environment alone (what a tool called without any uses)."""
        return cls().resolved(environ)

    def source(self, name: str) -> str:
        """How messages name where field ``name``'s value came from: ``VAR=value``."""
        return f"{VARIABLES[name]}={getattr(self, name)}"


def flag(name: str) -> str:
    """The command-line flag of a field (``bg_adv_model`` -> ``--bg-adv-model``)."""
    return "--" + name.replace("_", "-")


def _hint_of(name: str) -> str:
    return f"pass {flag(name)}, or set {VARIABLES[name]}"


def _check_choice(settings: ToolSettings, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(settings, name)
    if value is not None and value not in choices:
        raise InputError(
            f"{flag(name)} / {VARIABLES[name]}: unknown value {value!r}; "
            f"use one of {', '.join(choices)}",
            hint=_hint_of(name),
        )


def checked_path(path, problem: PathProblem, *, what: str, hint: str | None = None) -> str:
    """``path`` made absolute (workers may run elsewhere), once ``problem`` finds it usable.

    Args:
        path: A checkpoint file or folder the user gave.
        problem: ``path -> None`` when usable, else why not (cheap: no weights read).
        what: The tool's name, the error's prefix.
        hint: How to get a usable checkpoint, for the error.

    Raises:
        InputError: ``path`` is not usable.
    """
    why = problem(path)
    if why:
        raise InputError(f"{what}: {why}", hint=hint)
    return str(Path(path).expanduser().resolve())


def path_setting_problem(
    settings: ToolSettings, name: str, problem: PathProblem, hint: str
) -> str | None:
    """Why the checkpoint of field ``name`` cannot be used, or None.

    Returns ``hint`` when the field is unset, else ``"VAR=value: problem"``: the one-line
    reason a registered resource's ``check`` gives (see
    :func:`robustlab.shifts.registry.register_resource`).
    """
    path = getattr(settings, name)
    if not path:
        return hint
    why = problem(path)
    return f"{settings.source(name)}: {why}" if why else None


__all__ = [
    "DTYPES",
    "EDIT_FILL_BACKENDS",
    "VARIABLES",
    "ToolSettings",
    "checked_path",
    "flag",
    "path_setting_problem",
]
