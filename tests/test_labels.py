"""Label spaces: the shipped tables, lookups, and user CSV spaces."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from robustlab.data.labels import LabelSpace, get_label_space, list_label_spaces


def test_imagenet1k_matches_shared_csv(samples_dir):
    space = get_label_space("imagenet1k")
    rows = list(
        csv.DictReader(
            (samples_dir.parent / "imagenet_classes.csv").read_text(encoding="utf-8").splitlines()
        )
    )
    assert len(space) == 1000 and space.kind == "full"
    assert list(space.wnids) == [r["wnid"] for r in rows]
    assert list(space.classes) == [r["name"] for r in rows]
    assert list(space.wnids) == sorted(space.wnids)


def test_imagenet1k_index_of_every_form():
    space = get_label_space("imagenet1k")
    assert space.index_of("n01440764") == 0
    assert space.index_of("tench") == 0
    assert space.index_of("Great White Shark") == 2
    assert space.index_of("great_white_shark") == 2
    assert space.index_of("999") == 999
    assert space.index_of(5) == 5


@pytest.mark.parametrize("key", ["n99999999", "not a class", "1000", -1])
def test_index_of_unknown_names_the_key(key):
    with pytest.raises(ValueError, match=str(key)):
        get_label_space("imagenet1k").index_of(key)


def test_shared_readable_name_is_refused_as_ambiguous():
    space = get_label_space("imagenet1k")
    with pytest.raises(ValueError, match="more than one class"):
        space.index_of("crane")
    # ... and the two cranes stay reachable by wnid.
    assert {space.index_of("n02012849"), space.index_of("n03126707")} == {134, 517}


def test_every_shared_sample_label_resolves(samples_dir):
    space = get_label_space("imagenet1k")
    for row in csv.DictReader(
        (samples_dir / "labels.csv").read_text(encoding="utf-8").splitlines()
    ):
        assert space.index_of(row["wnid"]) == int(row["index"])


def test_imagenet9_mapping_is_the_official_one():
    space = get_label_space("imagenet9")
    assert len(space) == 9 and space.kind == "mapping"
    assert space.folders[2] == "02_wheeled vehicle" and space.classes[6] == "musical instrument"
    ids = [i for group in space.imagenet_ids for i in group]
    assert len(ids) == len(set(ids)) == 370  # 370 ImageNet classes, each in one group
    # Group sizes of in_to_in9.json (dog ... fish).
    assert [len(g) for g in space.imagenet_ids] == [116, 52, 42, 36, 35, 27, 26, 20, 16]
    in1k = get_label_space("imagenet1k")
    dog = space.imagenet_ids[space.index_of("00_dog")]
    assert in1k.index_of("Chihuahua") in dog and in1k.index_of("tench") not in dog
    assert space.index_of("dog") == space.index_of("00_dog") == space.index_of("0") == 0
    # ImageNet photos filed by wnid resolve to their super-class; unmapped ones do not.
    assert space.index_of("n02085620") == 0  # Chihuahua -> dog
    with pytest.raises(ValueError, match="'n03126707' is not a class of label space 'imagenet9'"):
        space.index_of("n03126707")  # crane (machine): unmapped


def test_imagenet_d_mapping():
    space = get_label_space("imagenet-d")
    assert len(space) == 113 and space.kind == "mapping"
    assert all(1 <= len(g) <= 3 for g in space.imagenet_ids)
    in1k = get_label_space("imagenet1k")
    chair = space.imagenet_ids[space.index_of("chair")]
    assert sorted(in1k.classes[i] for i in chair) == [
        "barber chair",
        "folding chair",
        "rocking chair",
    ]
    assert space.index_of("alarm_clock") == 0 and space.index_of("wok") == 112
    assert space.index_of("binder_closed") == space.index_of("binder (closed)")


@pytest.mark.parametrize("name", ["imagenet-a", "imagenet-r"])
def test_200_class_subsets(name):
    space = get_label_space(name)
    in1k = get_label_space("imagenet1k")
    assert len(space) == 200 and space.kind == "subset"
    ids = space.subset_ids
    assert list(ids) == sorted(set(ids))
    assert [in1k.wnids[i] for i in ids] == list(space.wnids)
    assert space.index_of(space.wnids[17]) == 17


def test_aliases_and_unknown_space():
    assert get_label_space("ImageNet-1k") is get_label_space("imagenet1k")
    assert {n for n, _ in list_label_spaces()} >= {"imagenet1k", "imagenet9", "imagenet-d"}
    with pytest.raises(ValueError, match="unknown label space 'imagenet-x'"):
        get_label_space("imagenet-x")


def test_user_csv_subset_and_mapping(tmp_path):
    sub = tmp_path / "sub.csv"
    sub.write_text("wnid,name\nn01443537,goldfish\nn01440764,tench\n")
    space = get_label_space(str(sub))
    assert space.kind == "subset" and space.subset_ids == (0, 1)  # ImageNet order
    assert space.index_of("goldfish") == 1
    mapping = tmp_path / "map.csv"
    mapping.write_text("name,imagenet_ids,folder\nfish,0 1 2,fish_dir\ncat,281 282\n")
    space = get_label_space(str(mapping))
    assert space.kind == "mapping" and space.imagenet_ids == ((0, 1, 2), (281, 282))
    assert space.index_of("fish_dir") == 0 and space.index_of("cat") == 1


@pytest.mark.parametrize(
    "text, match",
    [
        ("name,wnid\nfoo,n00000000\n", "not an ImageNet-1k wnid"),
        ("name,imagenet_ids\nfoo,1 x\n", "must be integers"),
        ("name,imagenet_ids\nfoo,1000\n", "ImageNet ids"),
        ("name,other\nfoo,1\n", "needs a 'name' column"),
    ],
)
def test_user_csv_errors(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        get_label_space(str(path))


def test_mapping_ids_validated():
    with pytest.raises(ValueError, match="maps to one id"):
        LabelSpace("x", ("a",), (None,), ("a",), "subset", ((1, 2),))
    ids = Counter(i for g in get_label_space("imagenet-d").imagenet_ids for i in g)
    assert max(ids.values()) == 1
