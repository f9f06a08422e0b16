"""Download a data archive once, check its SHA-256, and unpack it safely."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloudlstm.errors import DownloadError, UserError, out_of_space

__all__ = ["check_download", "check_url_read", "data_folder", "download_and_extract"]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
# Names of the archives unpacked in turn when a downloaded archive holds them
ARCHIVE_ENDINGS = (".zip", ".tar", ".tar.gz", ".tgz")


def check_download(value: Any) -> bool:
    """``data.source.download`` as a boolean.

    Raises:
        UserError: another value (``bool("no")`` would be true, and fetch in silence).
    """
    if not isinstance(value, bool):
        raise UserError(f"data.source.download={value!r}: use true or false.")
    return value


def check_url_read(url: str, default: str, download: bool) -> None:
    """Refuse ``url`` where it is not the source's ``default`` and ``download`` is false:
    only a download fetches it, so another archive named would be ignored without a word,
    wherever it comes from (the command, an experiment's config, a source built in Python).
    ``eval.py`` leaves a run's own saved url out where it fetches nothing
    (:func:`cloudlstm.assembly.source_options.saved_url_left_out`).

    Raises:
        UserError: names the url and the two ways out.
    """
    if download or url == default:
        return
    raise UserError(
        f"data.source.url={url} names the archive that data.source.download=true fetches "
        "where the files are missing, and data.source.download=false fetches none: set "
        "data.source.download=true, or leave data.source.url out."
    )


def data_folder(
    root: Path,
    holds: Callable[[Path], bool],
    download: bool = False,
    url: str = "",
    sha256: str | None = None,
) -> Path | None:
    """The folder of a data set's files: ``root`` where it ``holds`` them, else the first of
    its subfolders by name that does (an official archive unpacks into one); None where none
    does. Missing, and with ``download``, ``url`` is fetched and unpacked into ``root``
    first (:func:`download_and_extract`).

    Raises:
        UserError: ``sha256`` without ``download``: nothing is fetched, so nothing would be
            checked against it.
    """
    if sha256 is not None and not download:
        raise UserError(
            f"data.source.sha256={sha256} checks the archive that data.source.download=true "
            "fetches, and data.source.download=false fetches none: set "
            "data.source.download=true, or leave data.source.sha256 out (eval.py, whose run's "
            "config.yaml holds it: add data.source.sha256=null to its command)."
        )
    found = _first_holding(root, holds)
    if found is None and download:
        download_and_extract(url, root, sha256=sha256)
        found = _first_holding(root, holds)
    return found


def _first_holding(root: Path, holds: Callable[[Path], bool]) -> Path | None:
    if not root.is_dir():
        return None
    for folder in (root, *sorted(p for p in root.iterdir() if p.is_dir())):
        if holds(folder):
            return folder
    return None


def download_and_extract(
    url: str,
    dest_dir: str | os.PathLike,
    sha256: str | None = None,
    filename: str | None = None,
) -> Path:
    """Fetch ``url`` into ``dest_dir`` and unpack it there if it is a zip or tar(.gz) archive.

    Args:
        url: ``http(s)://`` or ``file://`` address.
        dest_dir: folder to download and unpack into (created if needed).
        sha256: expected SHA-256 hex digest of the downloaded file; ``None`` skips the check.
        filename: name to save the download under (default: the last part of the URL path).

    Returns:
        ``dest_dir`` as a :class:`Path`.

    Idempotent: a marker file ``.<filename>.done`` records a finished download+unpack, and a
    second call returns at once. An archive inside the archive (UCI's zip of a zip) is
    unpacked too, next to where it lies. A checksum mismatch deletes the bad file and raises
    ``ValueError`` with both digests; archive members that would land outside ``dest_dir``
    (absolute paths, ``..``, links) are refused before anything is written.
    """
    dest = Path(dest_dir)
    name = filename or Path(urllib.parse.urlparse(url).path).name or "download"
    marker = dest / f".{name}.done"
    if marker.exists():
        log.info("%s already downloaded and unpacked in %s.", name, dest)
        return dest
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DownloadError(
            f"Cannot make the folder {dest} to download {url} into ({err.strerror or err}): "
            "give data.source.root=<a folder you can write>."
        ) from None
    target = dest / name
    digest = _fetch(url, target)
    if sha256 is not None and digest != sha256.lower():
        target.unlink()
        raise UserError(
            f"Checksum mismatch for {url}: expected SHA-256 {sha256.lower()}, got {digest}. The "
            "file was deleted; retry, or check the URL and the expected checksum."
        )
    try:
        for inner in _extract(target, dest):  # an archive inside (UCI's zip of a zip)
            _extract(inner, inner.parent)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as err:
        raise DownloadError(
            f"The archive {target} from {url} is damaged ({err}): run again to download it "
            "anew, or unpack a good copy into that folder by hand."
        ) from None
    except OSError as err:
        if full := out_of_space(err):
            raise full from None
        raise
    marker.write_text(f"{url}\nsha256 {digest}\n")
    return dest


def _fetch(url: str, target: Path) -> str:
    """Stream ``url`` to ``target`` (via a temporary file); returns the SHA-256 hex digest."""
    log.info("Downloading %s -> %s", url, target)
    sha = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
            while chunk := resp.read(_CHUNK):
                sha.update(chunk)
                out.write(chunk)
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError, ValueError) as err:
        if full := out_of_space(err, target):
            raise full from None
        raise DownloadError(
            f"Could not download {url} ({err}). Check the address and your connection, or "
            f"download the file by hand into {target.parent}."
        ) from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return sha.hexdigest()


def _inside(dest: Path, member: str) -> bool:
    root = dest.resolve()
    path = (root / member).resolve()
    return path == root or root in path.parents


def _extract(archive: Path, dest: Path) -> list[Path]:
    """Unpack a zip or tar archive into ``dest``; other files are left as they are.

    Returns the unpacked files that are archives themselves (by their names' endings), which
    the caller may unpack in turn; [] for a file that is no archive.
    """
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            bad = [m for m in names if Path(m).is_absolute() or not _inside(dest, m)]
            _refuse(archive, bad)
            zf.extractall(dest)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            # Links could point anywhere; data archives have no need for them.
            bad = [m.name for m in members if not (m.isfile() or m.isdir())]
            bad += [m.name for m in members if not _inside(dest, m.name)]
            _refuse(archive, bad)
            names = [m.name for m in members if m.isfile()]
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # Python < 3.11.4: members were checked above
                tf.extractall(dest)
    else:
        return []
    log.info("Unpacked %s into %s.", archive.name, dest)
    return [dest / name for name in names if name.lower().endswith(ARCHIVE_ENDINGS)]


def _refuse(archive: Path, bad: list[str]) -> None:
    if bad:
        shutil.move(archive, archive.with_name(archive.name + ".rejected"))
        raise UserError(
            f"Refusing to unpack {archive.name}: {len(bad)} member(s) would be written outside "
            f"the destination folder or are links (e.g. {bad[0]!r}). The archive was renamed to "
            f"{archive.name}.rejected; do not use it."
        )
