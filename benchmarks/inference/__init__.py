"""What the sparse models gain at inference (dense, masked, CSR; ONNX Runtime, PyTorch)."""
