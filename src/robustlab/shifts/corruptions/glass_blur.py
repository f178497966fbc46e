"""glass_blur (ImageNet-C, blur): not implemented yet; registers nothing."""
