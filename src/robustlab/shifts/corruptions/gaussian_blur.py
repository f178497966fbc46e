"""gaussian_blur (ImageNet-C, extra): not implemented yet; registers nothing."""
