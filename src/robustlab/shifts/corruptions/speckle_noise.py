"""speckle_noise (ImageNet-C, extra): not implemented yet; registers nothing."""
