"""frost (ImageNet-C, weather): not implemented yet; registers nothing."""
