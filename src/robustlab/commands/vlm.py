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


def _items(args, store):
    """The items to ask about, the source that identifies the run, and the data root.

    Subsets and ``--limit`` only choose which items to ask now; they are not part of the
    source, so asking about one subset and then all of them continues one run.
    """
    from pathlib import Path

    from robustlab.errors import InputError
    from robustlab.workflows.imagenet_d.vlm.questions import items_from_clip_run, read_question_csvs

    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
    if args.clip_run:
        items = [it for rid in args.clip_run for it in items_from_clip_run(store, rid)]
        if subsets:
            items = [it for it in items if it.subset in subsets]
        return items, {"clip_runs": sorted(args.clip_run)}, None
    if not args.data:
        raise InputError(
            "pass --data ROOT (the ImageNet-D folder with questions/) or --clip-run RUN_ID"
        )
    root = Path(args.data).expanduser().resolve()
    # None: the folder's own questions/, read under the link rule (questions.py).
    questions = Path(args.questions).expanduser().resolve() if args.questions else None
    items = read_question_csvs(root, questions, subsets)
    source = {"data": str(root), "questions": str(questions or root / "questions")}
    return items, source, str(root)


def run(args) -> int:
    from robustlab.store import Store
    from robustlab.workflows.imagenet_d.vlm.model import load_vlm
    from robustlab.workflows.imagenet_d.vlm.run import VLMAsking, VLMData, ask_all

    asking = VLMAsking(
        mode=args.mode,
        seed=args.seed,
        shuffle=args.shuffle,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        rule=args.scoring,
    )
    store = Store(args.db)
    store.check()
    items, source, root = _items(args, store)
    if args.limit is not None:
        items = items[: args.limit]
    vlm = load_vlm(args.model, device=args.device, prompt_format=args.template)
    res = ask_all(
        vlm,
        items,
        store,
        asking,
        VLMData(source=source, data_root=root),
        progress=not args.no_progress,
    )
    print(
        f"vlm run {res.run_id} ({'resumed' if res.resumed else 'new'}, {args.mode}, "
        f"template {vlm.prompt_format}"
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
