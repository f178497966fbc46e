"""contrast (ImageNet-C, digital): not implemented yet; registers nothing."""
