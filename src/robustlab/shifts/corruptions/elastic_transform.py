"""elastic_transform (ImageNet-C, digital): not implemented yet; registers nothing."""
