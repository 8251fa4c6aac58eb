# mmdet's SSDLite-MobileNetV2 (ssd/ssdlite_mobilenetv2-scratch_8xb24-600e_coco.py) adapted to the suite's
# VOC-layout substitute set (tasks.voc.make_set: 10 CIFAR-10 classes on 160-240 px canvases) on a
# 2-core CPU: 160 px input as the suite's own SSD on that set, anchors scaled from the 320 px original by 1/2,
# zoom-out up to 2x (4x would leave most objects a few pixels wide at 160 px), batch 32, VOC07 11-point mAP;
# 14 epochs: about 2.5 s an iteration on one core here, so 1,750 iterations (~75 min) leave room in one ~3 h
# session of this CPU for the pruning cells of Table 5 after it.
# Train with `python -m tasks.voc.mmdet.train --config <this file>`.
_base_ = "mmdet::ssd/ssdlite_mobilenetv2-scratch_8xb24-600e_coco.py"

classes = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
input_size = 160
data_root = "data/voc-cifar/VOCdevkit/"  # the default of tasks.voc.make_set; --data-root replaces it
mean = [123.675, 116.28, 103.53]

model = dict(
    bbox_head=dict(
        num_classes=len(classes),
        anchor_generator=dict(
            strides=[16, 32, 53, 80, 160, 160],  # feature maps 10, 5, 3, 2, 1, 1 at 160 px
            min_sizes=[24, 50, 75, 101, 126, 152],
            max_sizes=[50, 75, 101, 126, 152, 160],
        ),
    )
)

train_pipeline = [
    dict(type="LoadImageFromFile"),
    dict(type="LoadAnnotations", with_bbox=True),
    dict(type="Expand", mean=mean, to_rgb=True, ratio_range=(1, 2)),
    dict(type="MinIoURandomCrop", min_ious=(0.1, 0.3, 0.5, 0.7, 0.9), min_crop_size=0.3),
    dict(type="Resize", scale=(input_size, input_size), keep_ratio=False),
    dict(type="RandomFlip", prob=0.5),
    dict(
        type="PhotoMetricDistortion",
        brightness_delta=32,
        contrast_range=(0.5, 1.5),
        saturation_range=(0.5, 1.5),
        hue_delta=18,
    ),
    dict(type="PackDetInputs"),
]
test_pipeline = [
    dict(type="LoadImageFromFile"),
    dict(type="Resize", scale=(input_size, input_size), keep_ratio=False),
    dict(type="LoadAnnotations", with_bbox=True),
    dict(type="PackDetInputs", meta_keys=("img_id", "img_path", "ori_shape", "img_shape", "scale_factor")),
]

voc = dict(
    type="VOCDataset", data_root=data_root, data_prefix=dict(sub_data_root="VOC2007/"), metainfo=dict(classes=classes)
)
train_dataloader = dict(
    batch_size=32,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type="DefaultSampler", shuffle=True),
    batch_sampler=None,
    dataset=dict(
        _delete_=True,
        **voc,
        ann_file="VOC2007/ImageSets/Main/trainval.txt",
        filter_cfg=dict(filter_empty_gt=True),
        pipeline=train_pipeline,
    ),
)
val_dataloader = dict(
    batch_size=16,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        _delete_=True, **voc, ann_file="VOC2007/ImageSets/Main/test.txt", test_mode=True, pipeline=test_pipeline
    ),
)
test_dataloader = val_dataloader
val_evaluator = dict(_delete_=True, type="VOCMetric", metric="mAP", eval_mode="11points")
test_evaluator = val_evaluator

max_epochs = 14
train_cfg = dict(type="EpochBasedTrainLoop", max_epochs=max_epochs, val_interval=10)
param_scheduler = [
    dict(type="LinearLR", start_factor=0.001, by_epoch=False, begin=0, end=125),  # one epoch of warm-up
    dict(type="CosineAnnealingLR", begin=0, T_max=max_epochs, end=max_epochs, by_epoch=True, eta_min=0),
]
# From scratch: the peak rate of the suite's own SSD recipe on this set (tasks.voc.train), mmdet's decay.
optim_wrapper = dict(optimizer=dict(lr=0.05, momentum=0.9, weight_decay=4.0e-5))
auto_scale_lr = dict(enable=False, base_batch_size=32)
default_hooks = dict(
    checkpoint=dict(type="CheckpointHook", interval=1, max_keep_ckpts=2, save_last=True),
    logger=dict(type="LoggerHook", interval=25),
)
env_cfg = dict(cudnn_benchmark=False)
randomness = dict(seed=0)
