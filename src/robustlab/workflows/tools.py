"""The tool settings a request names: the spec part every workflow that applies shifts takes.

``ai_bg``'s inpainter, ``bg_complexity``'s diffusion model and classifier and the attribute
edits' hole-fill backend decide pixels (and so what the run record and a generated folder's
manifest describe), so they are request fields like the seed: the ``--inpainter``,
``--bg-diffusion``, ``--edit-fill``... flags and the keywords of the same names. A field
left out takes its environment variable, the documented default
(:class:`robustlab.settings.ToolSettings`); the request resolves that once,
when it is built, and the plan ships the resolved value with the work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from robustlab.settings import ToolSettings

__all__ = ["ToolSpec"]


@dataclass(frozen=True)
class ToolSpec(ToolSettings):
    """:class:`~robustlab.settings.ToolSettings` as a request names them.

    Besides the settings' own checks (backend and dtype names), a checkpoint given here is
    checked now and made absolute (workers may run elsewhere): a path that is no checkpoint
    is a one-line error before any work, where the same path in the environment only skips
    the shifts that need it (with the reason logged), as it always did.

    Attributes:
        settings: The resolved settings (every field left out taken from the environment
            once, here): what the plan describes and ships.

    Raises:
        InputError: an unknown backend or dtype, or a checkpoint path that is not usable.
    """

    settings: ToolSettings = field(
        init=False, repr=False, compare=False, default_factory=ToolSettings
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inpainter:
            from robustlab.shifts.generative.inpaint import checked_inpainter

            object.__setattr__(self, "inpainter", checked_inpainter(self.inpainter))
        if self.bg_diffusion:
            from robustlab.shifts.generative.guided_bg import checked_bg_diffusion

            object.__setattr__(self, "bg_diffusion", checked_bg_diffusion(self.bg_diffusion))
        object.__setattr__(self, "settings", self.resolved())
