"""Integration tests run on the real data under ../shared/data (CIFAR images and pretrained weights)."""

import pytest

from tests.conftest import require_data


@pytest.fixture(autouse=True)
def _real_cifar():
    require_data("cifar10", "CIFAR-10")
    require_data("weights/cifar10", "the pretrained CIFAR-10 ResNets")
