"""shot_noise (ImageNet-C, noise): not implemented yet; registers nothing."""
