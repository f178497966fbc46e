"""jpeg_compression (ImageNet-C, digital): not implemented yet; registers nothing."""
