"""VOC07 mAP@0.5 against a case worked out by hand."""

import numpy as np
import pytest
import torch

from tasks.voc.metrics import GroundTruth, voc07_ap, voc07_map

CLASSES = ("BACKGROUND", "dog", "cat", "bird")


def gt(image_id, boxes, labels, difficult):
    return GroundTruth(
        image_id,
        torch.tensor(boxes, dtype=torch.float32),
        torch.tensor(labels),
        torch.tensor(difficult, dtype=torch.bool),
    )


def detections(*rows):
    """Detections per image from (image id, label, score, box) rows."""
    out = {}
    for image_id in dict.fromkeys(r[0] for r in rows):
        _, labels, scores, boxes = zip(*(r for r in rows if r[0] == image_id))
        out[image_id] = {"labels": torch.tensor(labels), "scores": torch.tensor(scores), "boxes": torch.tensor(boxes)}
    return out


def test_voc07_map_hand_worked():
    # Ground truth (label 1 = dog, 2 = cat):
    #   image A: dog g1 [0,0,10,10]; dog g2 [20,20,30,30] difficult
    #   image B: dog g3 [0,0,10,10]
    #   image C: dog g4 [50,50,60,60]
    #   image D: cat [0,0,20,20]
    # Non-difficult dogs: g1, g3, g4 -> 3 positives.
    truth = [
        gt("A", [[0, 0, 10, 10], [20, 20, 30, 30]], [1, 1], [False, True]),
        gt("B", [[0, 0, 10, 10]], [1], [False]),
        gt("C", [[50, 50, 60, 60]], [1], [False]),
        gt("D", [[0, 0, 20, 20]], [2], [False]),
    ]
    dets = detections(
        ("A", 1, 0.9, [0, 0, 10, 10]),  # d1: IoU 1 with g1                          -> TP
        ("A", 1, 0.8, [20, 20, 30, 30]),  # d2: IoU 1 with difficult g2                -> ignored
        ("A", 1, 0.7, [1, 0, 10, 10]),  # d3: IoU 90/100 = 0.9 with g1, taken by d1  -> FP
        ("B", 1, 0.6, [0, 0, 10, 20]),  # d4: IoU 100/200 = 0.5, not > 0.5          -> FP
        ("C", 1, 0.5, [50, 50, 60, 60]),  # d5: IoU 1 with g4                          -> TP
        ("D", 1, 0.4, [0, 0, 20, 20]),  # d6: no dog in D                            -> FP
        ("D", 2, 0.3, [0, 0, 20, 20]),  # cat: IoU 1                                 -> TP
        ("A", 3, 0.9, [0, 0, 10, 10]),  # bird: no bird anywhere (class left out of the mean)
    )
    # Dog, along the ranking d1..d6 (d2 counts as neither): cumulative TP 1 1 1 1 2 2, FP 0 0 1 2 2 3
    #   precision 1, 1, 1/2, 1/3, 1/2, 2/5;   recall 1/3, 1/3, 1/3, 1/3, 2/3, 2/3
    #   11 points: t = 0, .1, .2, .3 -> max precision at recall >= t = 1      (4 points)
    #              t = .4, .5, .6    -> max(1/2, 2/5) = 1/2                  (3 points)
    #              t = .7 ... 1      -> recall never reaches t: 0            (4 points)
    #   AP(dog) = (4 x 1 + 3 x 0.5) / 11 = 5.5 / 11 = 0.5
    # Cat: one TP on the one box: precision 1 at recall 1 -> AP 1.
    # mAP = (50 + 100) / 2 = 75 (bird has no ground truth: undefined, not averaged).
    res = voc07_map(dets, truth, CLASSES)
    assert res["ap"]["dog"] == pytest.approx(50.0)
    assert res["ap"]["cat"] == pytest.approx(100.0)
    assert res["ap"]["bird"] is None
    assert res["map"] == pytest.approx(75.0)
    assert res["n_gt"] == {"dog": 3, "cat": 1, "bird": 0}
    assert res["n_detections"] == 8
    assert voc07_map({}, truth, CLASSES)["map"] == 0.0  # no detections at all: AP 0 for every class


def test_voc07_ap_points_follow_numpy_arange():
    # Recall exactly 0.3 does not reach the 4th point, np.arange's 0.30000000000000004 (devkit ports
    # and pytorch-ssd use the same points): 3 of 11 points have precision 1.
    assert voc07_ap(np.array([1.0, 1.0, 1.0]), np.array([0.1, 0.2, 0.3])) == pytest.approx(3 / 11)
    assert voc07_ap(np.array([1.0]), np.array([1.0])) == pytest.approx(1.0)
    assert voc07_ap(np.array([]), np.array([])) == 0.0


def test_detection_order_ties_are_stable_and_duplicates_are_false_positives():
    truth = [gt("A", [[0, 0, 10, 10]], [1], [False])]
    dets = detections(("A", 1, 0.5, [0, 0, 10, 10]), ("A", 1, 0.5, [0, 0, 10, 10]))
    # first of the tie is the TP: precision 1 at recall 1, then 1/2 -> AP 1
    assert voc07_map(dets, truth, CLASSES[:2])["map"] == pytest.approx(100.0)
    # a lower-scored exact box after a miss: precision 1/2 at recall 1 -> AP 0.5
    dets = detections(("A", 1, 0.9, [30, 30, 40, 40]), ("A", 1, 0.1, [0, 0, 10, 10]))
    assert voc07_map(dets, truth, CLASSES[:2])["map"] == pytest.approx(50.0)
