"""VOC reader on the real VOC2007 XML format; the CIFAR-based substitute set's generator."""

import numpy as np
import pytest
import torch
from PIL import Image

from tasks.grid.cifar_data import load_cifar
from tasks.grid.paths import DataNotFoundError, resolve_data_root
from tasks.voc.data import (
    DetectionImages,
    VOCDetection,
    preprocess,
    read_image_ids,
    voc2007_dir,
)

# VOC2007 test image 000001's annotation, verbatim (Annotations/000001.xml of VOCtest_06-Nov-2007).
VOC2007_000001 = """<annotation>
	<folder>VOC2007</folder>
	<filename>000001.jpg</filename>
	<source>
		<database>The VOC2007 Database</database>
		<annotation>PASCAL VOC2007</annotation>
		<image>flickr</image>
		<flickrid>341012865</flickrid>
	</source>
	<owner>
		<flickrid>Fried Camels</flickrid>
		<name>Jinky the Fruit Bat</name>
	</owner>
	<size>
		<width>353</width>
		<height>500</height>
		<depth>3</depth>
	</size>
	<segmented>0</segmented>
	<object>
		<name>dog</name>
		<pose>Left</pose>
		<truncated>1</truncated>
		<difficult>0</difficult>
		<bndbox>
			<xmin>48</xmin>
			<ymin>240</ymin>
			<xmax>195</xmax>
			<ymax>371</ymax>
		</bndbox>
	</object>
	<object>
		<name>person</name>
		<pose>Left</pose>
		<truncated>1</truncated>
		<difficult>0</difficult>
		<bndbox>
			<xmin>8</xmin>
			<ymin>12</ymin>
			<xmax>352</xmax>
			<ymax>498</ymax>
		</bndbox>
	</object>
</annotation>
"""
# Same format, a difficult object (as VOC marks them).
DIFFICULT = VOC2007_000001.replace("000001", "000002").replace(
    "<name>dog</name>\n\t\t<pose>Left</pose>\n\t\t<truncated>1</truncated>\n\t\t<difficult>0</difficult>",
    "<name>bottle</name>\n\t\t<pose>Unspecified</pose>\n\t\t<truncated>0</truncated>\n\t\t<difficult>1</difficult>",
)


def make_voc(root, xmls: dict[str, str], split="test"):
    folder = root / "VOCdevkit" / "VOC2007"
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    for image_id, xml in xmls.items():
        (folder / "Annotations" / f"{image_id}.xml").write_text(xml)
        pixels = torch.randint(0, 256, (500, 353, 3), dtype=torch.uint8, generator=gen)
        Image.fromarray(pixels.numpy()).save(folder / "JPEGImages" / f"{image_id}.jpg")
    (folder / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in xmls))
    return folder


def test_reads_real_voc2007_annotation(tmp_path):
    folder = make_voc(tmp_path, {"000001": VOC2007_000001, "000002": DIFFICULT})
    assert voc2007_dir(tmp_path) == folder
    data = VOCDetection(folder, "test")
    assert data.ids == ["000001", "000002"] and len(data.class_names) == 21
    a = data.annotations[0]
    assert (a.width, a.height) == (353, 500)
    # 0-based, as pytorch-ssd reads them: XML minus 1
    assert a.boxes.tolist() == [[47.0, 239.0, 194.0, 370.0], [7.0, 11.0, 351.0, 497.0]]
    assert [data.class_names[i] for i in a.labels] == ["dog", "person"]
    assert a.difficult.tolist() == [False, False]
    b = data.annotations[1]
    assert [data.class_names[i] for i in b.labels] == ["bottle", "person"] and b.difficult.tolist() == [True, False]
    img = data.image(0)
    assert img.shape == (3, 500, 353) and img.dtype == torch.uint8
    x, i = DetectionImages(data, 300)[0]
    assert x.shape == (3, 300, 300) and i == 0
    assert torch.allclose(preprocess(torch.full((3, 4, 4), 255, dtype=torch.uint8), 2), torch.full((3, 2, 2), 1.0))


def test_missing_paths_name_the_fix(tmp_path):
    with pytest.raises(DataNotFoundError, match="--data-root"):
        voc2007_dir(tmp_path)
    folder = make_voc(tmp_path, {"000001": VOC2007_000001})
    with pytest.raises(DataNotFoundError, match="trainval.txt"):
        VOCDetection(folder, "trainval")
    (folder / "Annotations" / "000001.xml").unlink()
    with pytest.raises(DataNotFoundError, match="000001.xml"):
        VOCDetection(folder, "test")


def test_unknown_class_needs_labels_txt(tmp_path):
    folder = make_voc(tmp_path, {"000001": VOC2007_000001.replace("<name>dog</name>", "<name>truck</name>")})
    with pytest.raises(ValueError, match="labels.txt"):
        VOCDetection(folder, "test")
    (folder / "labels.txt").write_text("truck,person\n")
    data = VOCDetection(folder, "test")
    assert data.class_names == ("BACKGROUND", "truck", "person")
    assert data.annotations[0].labels.tolist() == [1, 2]


def _cifar_test_sources():
    from tasks.voc.make_set import _scenes
    from tests.conftest import require_data

    require_data("cifar10/test.npz.xz", "CIFAR-10's test images")
    require_data("cifar100/test.npz.xz", "CIFAR-100's test images")
    root = resolve_data_root(None)
    objects, labels = load_cifar(root, "cifar10", "test")
    return objects[:200], labels[:200], _scenes(root, "test")


def test_generated_set_is_valid_voc_and_deterministic(tmp_path):
    from tasks.voc import make_set as mds

    objects, labels, scenes = _cifar_test_sources()
    assert len(scenes) == 600  # 6 CIFAR-100 scene classes x 100 test images
    folders = []
    for run in ("a", "b"):
        folder = mds.prepare_folder(tmp_path / run)
        counts = mds.write_split(
            folder, "test", range(1, 5), (objects, labels, scenes), seed=3, tag=2, log=lambda s: None
        )
        folders.append(folder)
    assert counts["images"] == 4 and 4 <= counts["objects"] <= 12
    assert (tmp_path / "a" / ".gitignore").read_text().strip().endswith("*")
    a, b = (VOCDetection(f, "test") for f in folders)
    assert a.class_names[1:] == mds.CIFAR10_CLASSES
    for k in range(4):
        assert (folders[0] / "Annotations" / f"{k + 1:06d}.xml").read_bytes() == (
            folders[1] / "Annotations" / f"{k + 1:06d}.xml"
        ).read_bytes()
        # the XML boxes are where make_image pasted the objects, and the JPEG holds its pixels
        image, objs = mds.make_image(np.random.default_rng([3, 2, k]), objects, labels, scenes)
        ann = a.annotations[k]
        assert torch.equal(ann.boxes, b.annotations[k].boxes)
        assert ann.boxes.tolist() == [[x1, y1, x2 - 1, y2 - 1] for _, x1, y1, x2, y2, _ in objs]
        assert ann.labels.tolist() == [lab + 1 for lab, *_ in objs]
        assert ann.difficult.tolist() == [d for *_, d in objs]
        assert (ann.width, ann.height) == (image.shape[2], image.shape[1])
        jpeg = a.image(k)
        assert (jpeg.float() - image.float()).abs().mean() < 6


def test_a_trainval_prefix_is_the_whole_sets_first_images(tmp_path):
    """The regression check's set: fewer trainval images, every written file and id as in the whole set."""
    import json

    from tasks.voc import make_set as mds
    from tests.conftest import require_data

    require_data("cifar10", "CIFAR-10")
    require_data("cifar100", "CIFAR-100")
    root = resolve_data_root(None)
    whole = mds.make_set(tmp_path / "whole", root, n_trainval=5, n_test=3, log=lambda s: None)
    part = mds.make_set(tmp_path / "part", root, n_trainval=5, n_test=3, log=lambda s: None, trainval_prefix=2)
    assert read_image_ids(part, "trainval") == read_image_ids(whole, "trainval")[:2] == ["000001", "000002"]
    assert read_image_ids(part, "test") == read_image_ids(whole, "test") == ["000006", "000007", "000008"]
    for name in ["000001", "000002", "000006", "000007", "000008"]:
        for sub, ext in (("JPEGImages", "jpg"), ("Annotations", "xml")):
            assert (part / sub / f"{name}.{ext}").read_bytes() == (whole / sub / f"{name}.{ext}").read_bytes()
    assert not (part / "JPEGImages" / "000003.jpg").exists()
    manifest = json.loads((part / "substitute.json").read_text())
    assert manifest["splits"]["trainval"]["images"] == 2 and manifest["splits"]["trainval"]["prefix_of"] == 5
