"""ImageNet-D's VLM protocol (robustlab.workflows.imagenet_d.vlm) on a tiny random LLaVA built here, offline."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robustlab.cli import main
from robustlab.errors import InputError, MissingResourceError
from robustlab.store import Store
from robustlab.store.schema import RunRecord
from robustlab.store.vlm import answers, summary, write_answers
from robustlab.models.vlm import load_vlm
from robustlab.workflows.imagenet_d.vlm.questions import (
    Item,
    distractor,
    items_from_clip_run,
    options,
    question,
    read_question_csvs,
)
from robustlab.workflows.imagenet_d.vlm.run import evaluate_vlm
from robustlab.workflows.imagenet_d.vlm.scoring import score_answer

PUBLISHED = (
    "What is the main object in this image? Choose from the following list: backpack, banana."
)
TEMPLATE = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %} {% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def save_tiny_llava(path):
    """A LLaVA with random weights (2-layer Llama, 2-layer CLIP vision tower on 28x28
    images, 4 patches) and a byte-level tokenizer with no merges, so any text encodes."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    specials = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]
    vocab = {s: i for i, s in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )
    images = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        chat_template=TEMPLATE,
        num_additional_image_tokens=1,
    )
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=28,
            patch_size=14,
        ),
        text_config=LlamaConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=512,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=3,
        ),
        image_token_index=vocab["<image>"],
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_tiny_llava(tmp_path_factory.mktemp("llava"))
    return folder, load_vlm(f"vlm:{folder}", device="cpu")


def _image(seed: int) -> Image.Image:
    """A smooth colour field with a disc: a photo-like input, different per seed."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:48, 0:64] / 64.0
    rgb = np.stack([x, y, 1 - x], -1) * rng.uniform(0.3, 1, 3)
    disc = (x - rng.uniform(0.3, 0.7)) ** 2 + (y - 0.35) ** 2 < 0.04
    rgb[disc] = rng.uniform(0, 1, 3)
    return Image.fromarray((rgb * 255).astype(np.uint8))


@pytest.fixture()
def imagenet_d(tmp_path):
    """An ImageNet-D-like root: background/<class>/<id>.png and questions/background.csv."""
    rows = [
        ("backpack", "backpack", "banana"),
        ("banana", "backpack", "banana"),
        ("bench", "bench", "bucket"),
        ("bucket", "pen", "plate"),
        ("pen", "can opener", "pen"),
    ]
    root = tmp_path / "ImageNet-D"
    with_rows = []
    for i, (gt, top1, top2) in enumerate(rows):
        rel = f"background/{gt.replace(' ', '_')}/{i}.png"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        _image(i).save(root / rel)
        with_rows.append([rel, gt, top1, top2])
    (root / "questions").mkdir()
    with open(root / "questions" / "background.csv", "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["image_dir", "gt_category", "top1_pred_cate", "top2_pred_cate"])
        w.writerows(with_rows)
    return root


def test_the_question_is_the_published_one_truth_first(tiny):
    _, vlm = tiny
    item = Item("background", "x.png", None, "backpack", "banana", "pen")
    first, second = options(item)
    assert question(first, second) == PUBLISHED
    # A LLaVA: ImageNet-D's llava_v1 conversation with its system prompt, not the
    # processor's chat template.
    assert vlm.prompt_format == "llava_v1"
    assert vlm.prompt(question(first, second)) == (
        "A chat between a curious human and an artificial intelligence assistant. The "
        "assistant gives helpful, detailed, and polite answers to the human's questions. "
        f"USER: <image>\n{PUBLISHED} ASSISTANT:"
    )
    enc = vlm.processor(images=_image(0), text=vlm.prompt(PUBLISHED), return_tensors="pt")
    assert PUBLISHED in vlm.processor.tokenizer.decode(enc["input_ids"][0])


def test_every_template_writes_the_prompt_of_the_official_conversation_py():
    """Prompts built by ImageNet-D's own LLaVA/llava/conversation.py (the fixture, made by
    benchmarks/imagenet_d_reference.py) for each template robustlab offers."""
    from robustlab.models.vlm import CONVERSATIONS

    ref = json.loads((Path(__file__).parent / "fixtures" / "imagenet_d_prompts.json").read_text())
    assert set(ref["prompts"]) == set(CONVERSATIONS)
    for name, texts in ref["prompts"].items():
        for q, want in zip(ref["questions"], texts):
            assert CONVERSATIONS[name].prompt(q) == want, name


def test_official_template_follows_the_model_family_and_name():
    from robustlab.models.vlm import official_conversation

    assert official_conversation("llava-1.5-7b-hf", "llava") == "llava_v1"
    assert official_conversation("llava-v1.5-13b", "llava") == "llava_v1"
    assert official_conversation("llava-v1.6-mistral-7b-hf", "llava_next") == "mistral_instruct"
    assert official_conversation("llava-v1.6-34b-hf", "llava_next") == "chatml_direct"
    assert official_conversation("qwen2-vl", "qwen2_vl") is None


def test_sampling_distribution_is_transformers_temperature_then_top_k_then_top_p():
    import torch
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    from robustlab.models.vlm import _SampleWith

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(4, 300, generator=g) * 3
    scores[0, :5] = scores[0].max()  # ties at the k-th score are kept
    for top_k, top_p in ((50, 1.0), (50, 0.9), (0, 0.7), (3, 1.0)):
        ref = TemperatureLogitsWarper(0.2)(None, scores.clone())
        if top_k:
            ref = TopKLogitsWarper(top_k)(None, ref)
        if top_p < 1:
            ref = TopPLogitsWarper(top_p)(None, ref)
        mine = _SampleWith(0.2, g, top_k, top_p).probabilities(scores)
        assert torch.equal(mine > 0, torch.softmax(ref, -1) > 0)
        torch.testing.assert_close(mine, torch.softmax(ref, -1))
    assert int((_SampleWith(0.2, g, 50).probabilities(scores)[1] > 0).sum()) == 50


def test_sampling_uses_top_k_50_unless_the_checkpoint_says_otherwise(tiny, tmp_path):
    import shutil

    folder, vlm = tiny
    assert (vlm.top_k, vlm.top_p) == (50, 1.0)
    other = tmp_path / "llava-topk"
    shutil.copytree(folder, other)
    (other / "generation_config.json").write_text(json.dumps({"top_k": 7, "top_p": 0.8}))
    again = load_vlm(f"vlm:{other}", device="cpu")
    assert (again.top_k, again.top_p) == (7, 0.8)
    assert again.describe()["top_k"] == 7


def test_shuffle_is_seeded_per_image_and_uses_both_orders():
    items = [Item("s", f"{i}.png", None, "backpack", "banana", "pen") for i in range(40)]
    orders = [options(it, shuffle=True, seed=3) for it in items]
    assert orders == [options(it, shuffle=True, seed=3) for it in items]
    assert {o[0] for o in orders} == {"backpack", "banana"}
    assert all(set(o) == {"backpack", "banana"} for o in orders)


def test_distractor_is_clip_top1_when_wrong_else_top2():
    assert distractor("pen", "plate", "pen") == "plate"
    assert distractor("pen", "pen", "plate") == "plate"
    with pytest.raises(InputError):
        distractor("pen", "pen", "pen")


def test_distractors_from_a_stored_clip_run(tmp_path):
    from robustlab.data.labels import get_label_space

    space = get_label_space("imagenet-d")
    store = Store(tmp_path / "r.duckdb")
    root = tmp_path / "ImageNet-D" / "texture"
    store.start_run(
        RunRecord(
            run_id="clip",
            model_spec="open_clip:ViT-B-32",
            data_root=str(root),
            label_space="imagenet-d",
        )
    )
    pen, opener, coffee, tshirt = (
        space.index_of(n) for n in ("pen", "can opener", "coffee/french press", "t-shirt")
    )
    store.write_predictions(
        "clip",
        {
            "sample_id": ["pen/a.png", "pen/b.png"],
            "shift": ["clean"] * 2,
            "level": ["0"] * 2,
            "label": [pen, pen],
            "class_name": ["pen", "pen"],
            "top5_ids": [[opener, pen, coffee, 0, 1], [pen, tshirt, opener, 0, 1]],
            "top5_probs": [[0.5, 0.2, 0.1, 0.1, 0.1]] * 2,
            "correct": [False, True],
            "correct5": [True, True],
        },
    )
    a, b = items_from_clip_run(store, "clip")
    assert (a.subset, a.image_id, a.path) == ("texture", "texture/pen/a.png", root / "pen/a.png")
    assert (a.gt, distractor(a.gt, a.top1, a.top2)) == ("pen", "can opener")
    # CLIP right: the distractor is its top-2, written as ImageNet-D's CLIP writes names.
    assert (b.gt, distractor(b.gt, b.top1, b.top2)) == ("pen", "t shirt")
    # A classifier's run ranks ImageNet-1k ids: refused, not read as ImageNet-D classes.
    store.start_run(
        RunRecord(
            run_id="resnet",
            model_spec="timm:resnet50",
            data_root=str(root),
            label_space="imagenet-d",
            config={"model": {"head": "mapping"}},
        )
    )
    with pytest.raises(InputError, match="zero-shot CLIP run"):
        items_from_clip_run(store, "resnet")


def test_cli_takes_items_from_a_stored_clip_run(tiny, tmp_path, capsys):
    from robustlab.data.labels import get_label_space

    space = get_label_space("imagenet-d")
    root = tmp_path / "ImageNet-D" / "material"
    (root / "banana").mkdir(parents=True)
    _image(3).save(root / "banana" / "a.png")
    store = Store(tmp_path / "r.duckdb")
    store.start_run(
        RunRecord(
            run_id="clip", model_spec="open_clip:x", data_root=str(root), label_space="imagenet-d"
        )
    )
    banana, backpack = space.index_of("banana"), space.index_of("backpack")
    store.write_predictions(
        "clip",
        {
            "sample_id": ["banana/a.png"],
            "shift": ["clean"],
            "level": ["0"],
            "label": [banana],
            "class_name": ["banana"],
            "top5_ids": [[backpack, banana, 0, 1, 2]],
            "top5_probs": [[0.5, 0.2, 0.1, 0.1, 0.1]],
            "correct": [False],
            "correct5": [True],
        },
    )
    rc = main(
        [
            "vlm",
            "--model",
            f"vlm:{tiny[0]}",
            "--clip-run",
            "clip",
            "--db",
            str(store.path),
            "--mode",
            "likelihood",
            "--device",
            "cpu",
        ]
    )
    assert rc == 0 and "material" in capsys.readouterr().out
    row = answers(store).iloc[0]
    assert (row["image_id"], list(row["options"])) == (
        "material/banana/a.png",
        ["banana", "backpack"],
    )
    assert row["correct"] == (row["chosen"] == "banana") and row["dropped"] is None


@pytest.mark.parametrize(
    "answer,gt,other,expected",
    [
        ("The main object is a backpack.", "backpack", "banana", ("backpack", True, None)),
        ("BANANA", "backpack", "banana", ("banana", False, None)),
        ("A backpack next to a banana", "backpack", "banana", (None, None, "both")),
        ("I see a chair.", "backpack", "banana", (None, None, "neither")),
        ("It is a television set", "tv", "bench", ("tv", True, None)),  # variant
        ("a dumbbell", "bench", "weight (exercise)", ("weight (exercise)", False, None)),
        ("a can opener", "pen", "can opener", ("can opener", False, None)),  # pen inside it
        ("a pen", "pen", "can opener", ("pen", True, None)),
        ("a can opener", "can opener", "pen", ("can opener", True, None)),
        (
            "plates on a drying rack for plates",
            "plate",
            "drying rack for plates",
            ("drying rack for plates", False, None),
        ),
    ],
)
def test_scorer_matches_substrings_and_variants(answer, gt, other, expected):
    v = score_answer(answer, gt, other)
    assert (v.chosen, v.correct, v.dropped) == expected


def test_dropped_answers_are_counted_and_left_out_of_accuracy(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    hand = ["a backpack", "a backpack", "a banana", "backpack or banana", "a chair", "nothing"]
    rows = []
    for i, text in enumerate(hand):
        v = score_answer(text, "backpack", "banana")
        rows.append(
            {
                "run_id": "r",
                "subset": "background",
                "image_id": str(i),
                "gt": "backpack",
                "distractor": "banana",
                "options": ["backpack", "banana"],
                "answer": text,
                "chosen": v.chosen,
                "correct": v.correct,
                "dropped": v.dropped,
                "logprobs": None,
                "seed": 1,
            }
        )
    write_answers(store, rows)
    s = summary(store, "r").iloc[0]
    assert (s.n, s.right, s.wrong, s.dropped_both, s.dropped_neither) == (6, 2, 1, 1, 2)
    assert s.accuracy == pytest.approx(2 / 3)


def _independent_logprob(vlm, image, q, option) -> float:
    """Sum of the option tokens' log-probabilities via transformers' own loss (mean NLL
    over the labelled tokens), prompt tokens masked out with -100."""
    import torch

    prompt = vlm.prompt(q)
    n = vlm.processor(images=image, text=prompt, return_tensors="pt")["input_ids"].shape[1]
    enc = vlm.processor(images=image, text=f"{prompt} {option}", return_tensors="pt")
    labels = enc["input_ids"].clone()
    labels[:, :n] = -100
    with torch.no_grad():
        loss = vlm.model(**enc, labels=labels).loss
    return -float(loss) * (enc["input_ids"].shape[1] - n)


def test_likelihood_mode_is_deterministic_and_picks_the_likelier_option(tiny):
    _, vlm = tiny
    for i, (a, b) in enumerate([("backpack", "banana"), ("pen", "can opener"), ("tv", "bench")]):
        image, q = _image(i), question(a, b)
        got = vlm.option_logprobs(image, q, [a, b])
        assert got == vlm.option_logprobs(image, q, [a, b])
        ref = [_independent_logprob(vlm, image, q, o) for o in (a, b)]
        assert got == pytest.approx(ref, rel=1e-4, abs=1e-4)
        item = Item("s", str(i), None, a, b, b)
        row = evaluate_item(vlm, item, image)
        assert row["chosen"] == (a if ref[0] >= ref[1] else b)
        assert row["answer"] == row["chosen"] and row["logprobs"] == got


def evaluate_item(vlm, item, image):
    from robustlab.workflows.imagenet_d.vlm.run import answer_item

    return answer_item(
        vlm,
        item,
        mode="likelihood",
        seed=0,
        shuffle=False,
        temperature=0.2,
        max_new_tokens=4,
        image=image,
    )


def test_original_mode_sampling_is_reproducible_with_a_seed(tiny):
    _, vlm = tiny
    image = _image(1)
    runs = [vlm.sample(image, PUBLISHED, seed=s, max_new_tokens=6) for s in (7, 7, 8, 9, 10)]
    assert runs[0] == runs[1]
    assert len(set(runs)) > 1  # the seed, not a fixed argmax, decides the answer
    import torch

    before = torch.random.get_rng_state()
    vlm.sample(image, PUBLISHED, seed=7, max_new_tokens=6)
    assert torch.equal(before, torch.random.get_rng_state())  # the global RNG is untouched


def test_cli_runs_resumes_without_duplicates_and_prints_per_subset(
    tiny, imagenet_d, tmp_path, capsys
):
    folder, vlm = tiny
    args = [
        "vlm",
        "--model",
        f"vlm:{folder}",
        "--data",
        str(imagenet_d),
        "--device",
        "cpu",
        "--max-new-tokens",
        "4",
        "--seed",
        "5",
    ]
    # In one go, for reference.
    assert main([*args, "--db", str(tmp_path / "whole.duckdb")]) == 0
    out = capsys.readouterr().out
    assert "background" in out and "accuracy" in out
    whole = answers(Store(tmp_path / "whole.duckdb"))
    # In two steps: the first 2 items, then all (an interrupted run finished later).
    db = tmp_path / "r.duckdb"
    assert main([*args, "--db", str(db), "--limit", "2"]) == 0
    assert "2 new answers" in capsys.readouterr().out
    assert main([*args, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "resumed" in out and "3 new answers" in out
    store = Store(db)
    steps = answers(store)
    assert len(steps) == 5 and steps["image_id"].is_unique and len(store.runs()) == 1
    # Per-image generators: the answers do not depend on which items were asked together.
    assert list(steps["answer"]) == list(whole["answer"])
    assert [list(o) for o in steps["options"]] == [
        ["backpack", "banana"],
        ["banana", "backpack"],
        ["bench", "bucket"],
        ["bucket", "pen"],
        ["pen", "can opener"],
    ]
    run = store.runs().iloc[0]
    assert run["config"]["mode"] == "original" and run["seed"] == 5
    assert run["weights_hash"] == vlm.fingerprint and run["status"] == "finished"
    assert run["n_samples"] == 5


def test_shuffled_likelihood_run_is_its_own_run(tiny, imagenet_d, tmp_path):
    _, vlm = tiny
    store = Store(tmp_path / "r.duckdb")
    items = read_question_csvs(imagenet_d)
    a = evaluate_vlm(vlm, items, store, mode="likelihood", shuffle=True, seed=1)
    b = evaluate_vlm(vlm, items, store, mode="likelihood", shuffle=False, seed=1)
    assert a.run_id != b.run_id and a.n_new == b.n_new == 5
    rows = answers(store, [a.run_id])
    assert [list(o) for o in rows["options"]] == [
        list(options(it, shuffle=True, seed=1)) for it in sorted(items, key=lambda i: i.image_id)
    ]
    assert rows["dropped"].isna().all()  # likelihood always names exactly one option
    assert json.dumps(store.get_run(a.run_id)["config"]["shuffle"]) == "true"


def test_bad_model_folders_are_one_line_errors(tmp_path, capsys):
    from transformers import BertConfig

    BertConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
    ).save_pretrained(tmp_path / "bert")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="bert model; expected a transformers image-text-to-text"):
        load_vlm(f"vlm:{tmp_path / 'bert'}")
    with pytest.raises(InputError, match="no config.json"):
        load_vlm(f"vlm:{tmp_path / 'empty'}")
    with pytest.raises(MissingResourceError):
        load_vlm(f"vlm:{tmp_path / 'nowhere'}")
    good = tmp_path / "good.csv"
    good.write_text(
        "image_dir\tgt_category\ttop1_pred_cate\ttop2_pred_cate\nx.png\tpen\tpen\tplate\n"
    )
    for model, words in (("bert", "is a bert model"), ("empty", "has no config.json")):
        rc = main(
            [
                "vlm",
                "--model",
                f"vlm:{tmp_path / model}",
                "--data",
                str(tmp_path),
                "--questions",
                str(good),
                "--db",
                str(tmp_path / "r.duckdb"),
            ]
        )
        err = capsys.readouterr().err
        assert rc == 2 and words in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    q = tmp_path / "q.csv"
    q.write_text("image_dir\tgt_category\ta\tb\nx.png\tpen\tpen\tplate\n")
    rc = main(
        [
            "vlm",
            "--model",
            f"vlm:{tmp_path / 'bert'}",
            "--data",
            str(tmp_path),
            "--questions",
            str(q),
            "--db",
            str(tmp_path / "r.duckdb"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "lacks column(s) top1_pred_cate" in err


def test_the_stored_record_is_the_one_vlm_runs_always_had(tiny, imagenet_d, tmp_path):
    """A vlm run's id and stored row, spelled out as the workflow wrote them before it went
    through ``records.identity.make_record``: the ``vlm-`` prefix over ``json.dumps`` with its
    default separators, the data folder as given (a link is not resolved), no package
    versions and no preprocessing, so every stored vlm run resumes under its id."""
    import hashlib

    _, vlm = tiny
    link = tmp_path / "via-link"
    link.symlink_to(imagenet_d)
    items = read_question_csvs(imagenet_d)[:2]
    store = Store(tmp_path / "r.duckdb")
    res = evaluate_vlm(
        vlm, items, store, seed=3, max_new_tokens=4, source={"kind": "t"}, data_root=str(link)
    )
    config = {
        "task": "vlm",
        "mode": "original",
        "shuffle": False,
        "temperature": 0.2,
        "max_new_tokens": 4,
        "source": {"kind": "t"},
        "prompt_format": vlm.prompt_format,
        "top_k": vlm.top_k,
        "top_p": vlm.top_p,
        "scoring": "official",
    }
    key = json.dumps({"model": vlm.fingerprint, **config, "seed": 3}, sort_keys=True, default=str)
    assert res.run_id == "vlm-" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    run = store.get_run(res.run_id)
    run["config"].pop("process")
    assert {k: run[k] for k in run if k not in ("started_at", "finished_at")} == {
        "run_id": res.run_id,
        "model_spec": vlm.spec,
        "weights_hash": vlm.fingerprint,
        "suite": "imagenet-d-vlm",
        "suite_version": None,
        "data_root": str(link),
        "data_fingerprint": None,
        "label_space": "imagenet-d",
        "preprocessing": {},
        "seed": 3,
        "versions": {},
        "config": {**config, "model": json.loads(json.dumps(vlm.describe(), default=str))},
        "status": "finished",
        "n_samples": 2,
        "n_skipped": 0,
        "skipped": [],
    }


def test_vlm_keywords_go_to_their_spec_and_bad_settings_fail_before_any_answer(tiny, tmp_path):
    from robustlab.workflows.imagenet_d.vlm.run import VLMAsking

    _, vlm = tiny
    store = Store(tmp_path / "r.duckdb")
    with pytest.raises(TypeError, match=r"evaluate_vlm\(\) .* 'temprature'; did you mean"):
        evaluate_vlm(vlm, [], store, temprature=0.5)
    with pytest.raises(InputError, match="unknown VLM scoring mode 'greedy'"):
        VLMAsking(mode="greedy")
    with pytest.raises(InputError, match="--temperature must be above 0"):
        evaluate_vlm(vlm, [], store, temperature=0)
    assert VLMAsking(mode="likelihood", temperature=0).temperature == 0  # unused there


def test_robustlab_vlm_asks_and_stores_what_the_command_does(tiny, imagenet_d, tmp_path, capsys):
    """``robustlab.vlm`` is the command's workflow: the same run id, the same answers in
    the database, the same per-subset summary the command prints."""
    import robustlab

    folder, _ = tiny
    by_cli, by_api = tmp_path / "cli.duckdb", tmp_path / "api.duckdb"
    flags = ["--data", str(imagenet_d), "--device", "cpu", "--seed", "3", "--limit", "3"]
    args = ["vlm", "--model", f"vlm:{folder}", *flags, "--max-new-tokens", "4"]
    assert main([*args, "--db", str(by_cli), "--subsets", "background", "--no-progress"]) == 0
    out = capsys.readouterr().out
    res = robustlab.vlm(
        f"vlm:{folder}",
        data=imagenet_d,
        device="cpu",
        seed=3,
        limit=3,
        max_new_tokens=4,
        subsets="background",
        db=by_api,
        progress=False,
    )
    assert f"vlm run {res.run_id} (new, original, template {res.prompt_format})" in out
    assert res.n_new == 3 and not res.resumed and not res.skipped
    cols = ["subset", "image_id", "options", "answer", "chosen", "correct", "dropped", "seed"]
    a, b = answers(Store(by_cli))[cols], answers(Store(by_api))[cols]
    assert Store(by_cli).runs()["run_id"].tolist() == [res.run_id]
    assert a.astype(str).values.tolist() == b.astype(str).values.tolist()
    (row,) = res.summary.itertuples()
    assert f"{row.subset:<12} {row.n:>6} {row.right:>6} {row.wrong:>6}" in out
    with pytest.raises(TypeError, match="did you mean"):
        robustlab.vlm(f"vlm:{folder}", dta=imagenet_d)
