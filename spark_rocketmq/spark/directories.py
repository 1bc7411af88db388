"""The sink's directories (transaction log, dead letters): a local path or any URI pyarrow.fs opens, and
the folder names of id namespaces in them."""

from __future__ import annotations

import pyarrow.fs as pafs

from ..errors import ConfigError


def folder_name(name: str) -> str:
    """A folder name for an id namespace: its characters kept where path-safe, the rest %-escaped."""
    return "".join(c if c.isalnum() or c in "-_." else f"%{ord(c):02X}" for c in name) or "%"


def open_directory(uri: str, option: str) -> tuple[pafs.FileSystem, str]:
    """(file system, root path without a trailing slash) of a local path or a URI pyarrow.fs opens
    (hdfs://, s3://, file://); ConfigError naming ``option`` when it cannot be opened."""
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except (ValueError, TypeError, OSError):
        try:  # a plain local path
            fs, root = pafs.LocalFileSystem(), uri
        except Exception as exc:
            raise ConfigError(f"option {option}={uri!r}: cannot be opened: {exc}") from None
    return fs, root.rstrip("/") or "/"
