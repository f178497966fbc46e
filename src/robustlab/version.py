"""The package's version, in the core layer so that any module may record it (run records,
manifests, kernel caches) without importing the package's face."""

__version__ = "0.1.0"
