"""``robustlab vlm --model vlm:PATH``: ImageNet-D's two-choice question put to a VLM."""

from __future__ import annotations

from robustlab.commands._args import add_no_progress, add_db, add_device, add_seed, count


def add_parser(sub) -> None:
    p = sub.add_parser(
        "vlm",
        help="ask a vision-language model ImageNet-D's two-choice question (paper protocol)",
        description="Ask a transformers image-text-to-text model (vlm:PATH, a local folder) "
        "'What is the main object in this image? Choose from the following list: {gt}, "
        "{distractor}.' with the distractor taken from CLIP (its top-1 if wrong, else its "
        "top-2), from the published questions/<subset>.csv or a stored CLIP run. Answers go to "
        "the results database (table vlm_answers); rerunning the command resumes the run.",
    )
    p.add_argument("--model", required=True, help="vlm:PATH, a folder saved with save_pretrained")
    p.add_argument(
        "--data",
        default=None,
        help="the ImageNet-D root (holding <subset>/<class>/<file> and questions/)",
    )
    p.add_argument(
        "--questions",
        default=None,
        help="a question CSV or folder of them (default DATA/questions)",
    )
    p.add_argument(
        "--clip-run",
        action="append",
        default=None,
        metavar="RUN_ID",
        help="take the items and distractors from this stored CLIP run instead "
        "(repeatable, one per subset)",
    )
    p.add_argument(
        "--subsets",
        default=None,
        help="only these subsets, comma-separated (e.g. background,texture)",
    )
    p.add_argument(
        "--mode",
        choices=("original", "likelihood"),
        default="original",
        help="original: sample at --temperature and match the answer text (paper); "
        "likelihood: pick the option with the higher log-likelihood (deterministic)",
    )
    p.add_argument(
        "--shuffle",
        action="store_true",
        help="ask the options in a seeded random order (the paper lists the truth first)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=0.2,
        help="sampling temperature (0.2); then top-k/top-p as the checkpoint's generation "
        "config says, else transformers' defaults ImageNet-D ran with (top-k 50, top-p 1.0)",
    )
    p.add_argument(
        "--scoring",
        choices=("official", "nested"),
        default="official",
        help="answer scorer: official (ImageNet-D's compute_accuracy.py, default) or nested "
        "(stricter: also decides answers where one option's text lies inside the other's)",
    )
    p.add_argument(
        "--template",
        default=None,
        help="conversation template: llava_v1, llava_v0, llava_llama_2, mistral_instruct, "
        "chatml_direct, mpt or chat_template (default: ImageNet-D's for the model's family, "
        "llava_v1 for LLaVA-1.5)",
    )
    p.add_argument("--max-new-tokens", type=int, default=512, help="answer length limit (512)")
    add_seed(p)
    p.add_argument("--limit", type=count, default=None, help="ask about the first N items only")
    add_db(p)
    add_device(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.imagenet_d.vlm.workflow import PARTS, run_vlm
    from robustlab.workflows.keywords import specs_from_args

    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
    res = run_vlm(**specs_from_args("vlm", args, PARTS, subsets=subsets, rule=args.scoring))
    print(
        f"vlm run {res.run_id} ({'resumed' if res.resumed else 'new'}, {args.mode}, "
        f"template {res.prompt_format}"
        f"{', shuffled' if args.shuffle else ''}): {res.n_new} new answers"
        + (f", {len(res.skipped)} unreadable images skipped" if res.skipped else "")
    )
    print(
        f"{'subset':<12} {'n':>6} {'right':>6} {'wrong':>6} {'both':>5} {'neither':>7} {'accuracy':>9}"
    )
    for r in res.summary.itertuples():
        # Accuracy is right / (right + wrong): undefined when every answer was dropped.
        acc = f"{100 * r.accuracy:>8.2f}%" if r.right + r.wrong else f"{'n/a':>9}"
        print(
            f"{r.subset:<12} {r.n:>6} {r.right:>6} {r.wrong:>6} {r.dropped_both:>5} "
            f"{r.dropped_neither:>7} {acc}"
        )
    return 0
