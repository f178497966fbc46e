"""spatter (ImageNet-C, extra): not implemented yet; registers nothing."""
