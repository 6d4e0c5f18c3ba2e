"""The installed distribution's version, read once from its metadata."""

from importlib import metadata

try:
    __version__ = metadata.version("hermes-store")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
